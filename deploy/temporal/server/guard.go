package main

import (
	"context"
	"fmt"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// signalGuard refuses, at the frontend, every signal whose bytes exceed limit: the signal's
// input, header, identity and name together (all of which its history event stores).
//
// Temporal bounds a signal's input by the blob size limit (2 MB), but not its header, which
// only the gRPC message size (4 MB) bounds; and it bounds a run's signals by count, not bytes.
// So a dozen large signals push a run's history past its 50 MB limit and the server
// terminates it: anyone who may signal can end a run. With this guard, a run takes at most
// history.maximumSignalsPerExecution × limit bytes of signals, which Tower keeps under the
// history's warning size (docs/approvals.md). Refused signals never reach the history.
func signalGuard(limit int) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if size, what := signalBytes(req); size > limit {
			return nil, serviceerror.NewInvalidArgument(fmt.Sprintf(
				"%s refused: %d bytes of signal (input, header, identity and name) over this "+
					"server's limit of %d (TOWER_SIGNAL_MAX_BYTES)", what, size, limit))
		}
		return handler(ctx, req)
	}
}

// signalBytes is how many bytes of signal a request would add to one run's history, and
// what the request is; 0 for requests that carry no signal.
func signalBytes(req any) (int, string) {
	switch r := req.(type) {
	case *workflowservice.SignalWorkflowExecutionRequest:
		return proto.Size(r.GetInput()) + proto.Size(r.GetHeader()) + len(r.GetIdentity()) +
			len(r.GetSignalName()), "signal " + r.GetSignalName()
	case *workflowservice.SignalWithStartWorkflowExecutionRequest:
		return proto.Size(r.GetSignalInput()) + proto.Size(r.GetHeader()) + len(r.GetIdentity()) +
			len(r.GetSignalName()), "signal-with-start " + r.GetSignalName()
	case *workflowservice.StartBatchOperationRequest:
		if op := r.GetSignalOperation(); op != nil {
			return proto.Size(op.GetInput()) + proto.Size(op.GetHeader()) + len(op.GetIdentity()) +
				len(op.GetSignal()), "batch signal " + op.GetSignal()
		}
	}
	return 0, ""
}
