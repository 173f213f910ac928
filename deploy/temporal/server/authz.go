package main

import (
	"context"
	"fmt"
	"sort"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/server/common/api"
	"go.temporal.io/server/common/authorization"
)

// Tower's authorizer: what each Tower role may ask of the frontend (docs/production.md,
// "Server authorization"). A call no rule allows is refused with PermissionDenied, before
// it reaches a run.
//
//   - any role in a namespace: its read-only calls (describe, list, count, query, history,
//     poll an update's outcome), and the cluster's read-only calls (system and cluster
//     info, namespaces, search attribute names). Payloads stay encrypted by Tower's codec.
//   - requester: StartWorkflowExecution, of the deployment's agent types on its task
//     queues only (TOWER_AUTH_AGENTS, TOWER_AUTH_QUEUES), and only a plain start: no cron
//     schedule, no eager execution (which would hand the requester the run's first task),
//     no conflict policy that terminates a running run, no completion callbacks, no
//     version pin. Nothing else: no signal, update, reset, terminate, cancel or batch.
//   - approver (an approver's `tower approve`, the inbox): SignalWorkflowExecution and
//     UpdateWorkflowExecution, which is how a decision reaches a run (the run checks its
//     signature), and ResetStickyTaskQueue (a stopped worker's run back to its queue; no
//     history event). Nothing else: no start, delete, reset, terminate or batch.
//   - operator: what rewrites or erases runs: reset, terminate, delete (a run's history is
//     its audit trail), batch operations (`tower fork`, `tower retry`, clean-up).
//   - service (Tower's worker, `tower chat`): the namespace's other WorkflowService calls:
//     poll and complete tasks, heartbeats, start, signal, update, cancel — none of the
//     operator's.
//   - cluster admin (temporal-system:admin, and the server's own internal frontend):
//     everything, including `tower setup` and namespace changes (namespaces, search
//     attributes).
//
// Namespace changes (register, update, deprecate) are AccessAdmin calls: admin only.
//
// With no token, only health checks (and GetSystemInfo, which clients call on connect).
type towerAuthorizer struct {
	agents map[string]bool // workflow types a requester may start
	queues map[string]bool // task queues a requester may start them on
}

func newTowerAuthorizer(agents, queues string) (*towerAuthorizer, error) {
	a := &towerAuthorizer{agents: set(agents), queues: set(queues)}
	if len(a.agents) == 0 || len(a.queues) == 0 {
		return nil, fmt.Errorf("the tower authorizer needs TOWER_AUTH_AGENTS (the agent types a " +
			"requester may start) and TOWER_AUTH_QUEUES (their task queues), comma-separated")
	}
	return a, nil
}

func set(list string) map[string]bool {
	out := map[string]bool{}
	for _, item := range strings.Split(list, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out[item] = true
		}
	}
	return out
}

func (a *towerAuthorizer) Authorize(_ context.Context, claims *authorization.Claims,
	target *authorization.CallTarget) (authorization.Result, error) {
	if authorization.IsHealthCheckAPI(target.APIName) {
		return authorization.Result{Decision: authorization.DecisionAllow}, nil
	}
	if claims == nil {
		return deny("no token: send \"authorization: Bearer <JWT>\"")
	}
	if claims.System&authorization.RoleAdmin != 0 {
		return allow(claims)
	}
	grants, _ := claims.Extensions.(towerGrants)
	role := grants[target.Namespace]
	meta := api.GetMethodMetadata(target.APIName)
	method := api.MethodName(target.APIName)
	switch {
	case meta.Scope == api.ScopeCluster && meta.Access == api.AccessReadOnly && len(grants) > 0:
		return allow(claims)
	case meta.Scope != api.ScopeNamespace || role == 0:
		return deny(fmt.Sprintf("%s: no Tower role in namespace %q", method, target.Namespace))
	case meta.Access == api.AccessReadOnly:
		return allow(claims)
	case role&roleOperator != 0 && operatorOnly[method]:
		return allow(claims)
	case role&roleService != 0 && meta.Access == api.AccessWrite && !operatorOnly[method] &&
		strings.HasPrefix(target.APIName, api.WorkflowServicePrefix):
		return allow(claims)
	case role&roleApprover != 0 && approverMay[method] &&
		strings.HasPrefix(target.APIName, api.WorkflowServicePrefix):
		return allow(claims)
	case role&roleRequester != 0 && method == "StartWorkflowExecution":
		start, _ := target.Request.(*workflowservice.StartWorkflowExecutionRequest)
		if why := a.startRefused(start); why != "" {
			return deny(why)
		}
		return allow(claims)
	}
	return deny(fmt.Sprintf("%s: not allowed to role %s in namespace %q (approvers and "+
		"Tower's services signal and update runs; only operators reset, terminate, delete "+
		"and run batches)", method, role, target.Namespace))
}

// operatorOnly: the calls that rewrite or erase runs, wholesale or one at a time.
var operatorOnly = map[string]bool{
	"ResetWorkflowExecution": true, "TerminateWorkflowExecution": true,
	"DeleteWorkflowExecution": true, "StartBatchOperation": true, "StopBatchOperation": true,
}

// approverMay: how a decision reaches a run; and handing a run back from a stopped
// worker's sticky queue (`tower approve` does, when that worker does not answer), which
// adds nothing to its history.
var approverMay = map[string]bool{"SignalWorkflowExecution": true,
	"UpdateWorkflowExecution": true, "ResetStickyTaskQueue": true}

// startRefused says why a requester may not make this start, or "" if it may.
func (a *towerAuthorizer) startRefused(r *workflowservice.StartWorkflowExecutionRequest) string {
	kind, queue := r.GetWorkflowType().GetName(), r.GetTaskQueue().GetName()
	switch {
	case r == nil:
		return "not a start request"
	case !a.agents[kind]:
		return fmt.Sprintf("workflow type %q is not one of this deployment's agents (%s)",
			kind, keys(a.agents))
	case !a.queues[queue]:
		return fmt.Sprintf("task queue %q is not one of this deployment's queues (%s)",
			queue, keys(a.queues))
	case r.GetCronSchedule() != "":
		return "a requester may not start a run on a cron schedule"
	case r.GetRequestEagerExecution():
		return "a requester may not ask for eager execution (its first task)"
	case r.GetWorkflowIdConflictPolicy() == enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING,
		r.GetWorkflowIdReusePolicy() == enumspb.WORKFLOW_ID_REUSE_POLICY_TERMINATE_IF_RUNNING:
		return "a requester's start may not terminate a running run"
	case len(r.GetCompletionCallbacks()) > 0 || r.GetOnConflictOptions() != nil:
		return "a requester may not attach completion callbacks"
	case r.GetVersioningOverride() != nil:
		return "a requester may not pin a run to a worker version"
	}
	return ""
}

func allow(claims *authorization.Claims) (authorization.Result, error) {
	return authorization.Result{Decision: authorization.DecisionAllow,
		Principal: &commonpb.Principal{Type: claims.AuthType, Name: claims.Subject}}, nil
}

// deny refuses with a reason the caller sees (the server says "Request unauthorized.").
func deny(reason string) (authorization.Result, error) {
	return authorization.Result{Decision: authorization.DecisionDeny, Reason: reason}, nil
}

func keys(m map[string]bool) string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func (r towerRole) String() string {
	var names []string
	for name, bit := range roleNames {
		if r&bit != 0 {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	sort.Strings(names)
	return strings.Join(names, "+")
}
