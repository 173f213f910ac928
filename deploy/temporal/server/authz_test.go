package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v4"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	updatepb "go.temporal.io/api/update/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/server/common/api"
	"go.temporal.io/server/common/authorization"
)

// The policy's table: every role against the calls that matter (docs/production.md's
// roles x APIs table; the cluster tier, tests/test_cluster_auth.py, shows the same
// through a real server).
func TestTowerPolicy(t *testing.T) {
	a, err := newTowerAuthorizer("refund", "tower")
	if err != nil {
		t.Fatal(err)
	}
	start := func(kind, queue string, edit func(*workflowservice.StartWorkflowExecutionRequest),
	) *workflowservice.StartWorkflowExecutionRequest {
		r := &workflowservice.StartWorkflowExecutionRequest{Namespace: "default",
			WorkflowType: &commonpb.WorkflowType{Name: kind},
			TaskQueue:    &taskqueuepb.TaskQueue{Name: queue}}
		if edit != nil {
			edit(r)
		}
		return r
	}
	update := func(name string) *workflowservice.UpdateWorkflowExecutionRequest {
		return &workflowservice.UpdateWorkflowExecutionRequest{Namespace: "default",
			Request: &updatepb.Request{Input: &updatepb.Input{Name: name}}}
	}
	who := map[string]*authorization.Claims{
		"nobody":    nil,
		"requester": {Subject: "r", Extensions: towerGrants{"default": roleRequester}},
		"operator":  {Subject: "o", Extensions: towerGrants{"default": roleOperator}},
		"service":   {Subject: "s", Extensions: towerGrants{"default": roleService}},
		"approver":  {Subject: "p", Extensions: towerGrants{"default": roleApprover}},
		"elsewhere": {Subject: "e", Extensions: towerGrants{"other": roleService}},
		"admin":     {Subject: "a", System: authorization.RoleAdmin},
	}
	cases := []struct {
		method  string
		request any
		allowed []string // who may: everyone else is refused
	}{
		{"GetSystemInfo", nil, []string{"nobody", "requester", "approver", "operator", "service", "elsewhere", "admin"}},
		{"DescribeNamespace", &workflowservice.DescribeNamespaceRequest{Namespace: "default"},
			[]string{"requester", "approver", "operator", "service", "admin"}},
		{"QueryWorkflow", &workflowservice.QueryWorkflowRequest{Namespace: "default"},
			[]string{"requester", "approver", "operator", "service", "admin"}},
		{"GetWorkflowExecutionHistory", &workflowservice.GetWorkflowExecutionHistoryRequest{Namespace: "default"},
			[]string{"requester", "approver", "operator", "service", "admin"}},
		{"ListBatchOperations", &workflowservice.ListBatchOperationsRequest{Namespace: "default"},
			[]string{"requester", "approver", "operator", "service", "admin"}},
		{"StartWorkflowExecution", start("refund", "tower", nil), []string{"requester", "service", "admin"}},
		{"StartWorkflowExecution", start("support", "tower", nil), []string{"service", "admin"}},
		{"StartWorkflowExecution", start("refund", "mine", nil), []string{"service", "admin"}},
		{"StartWorkflowExecution", start("refund", "tower", func(r *workflowservice.StartWorkflowExecutionRequest) {
			r.CronSchedule = "* * * * *"
		}), []string{"service", "admin"}},
		{"StartWorkflowExecution", start("refund", "tower", func(r *workflowservice.StartWorkflowExecutionRequest) {
			r.RequestEagerExecution = true
		}), []string{"service", "admin"}},
		{"StartWorkflowExecution", start("refund", "tower", func(r *workflowservice.StartWorkflowExecutionRequest) {
			r.WorkflowIdConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING
		}), []string{"service", "admin"}},
		{"SignalWithStartWorkflowExecution", &workflowservice.SignalWithStartWorkflowExecutionRequest{
			Namespace: "default", WorkflowType: &commonpb.WorkflowType{Name: "refund"}},
			[]string{"service", "admin"}},
		{"SignalWorkflowExecution", &workflowservice.SignalWorkflowExecutionRequest{Namespace: "default"},
			[]string{"approver", "service", "admin"}},
		{"UpdateWorkflowExecution", update("decide"), []string{"approver", "service", "admin"}},
		{"UpdateWorkflowExecution", update("retry"), []string{"approver", "service", "admin"}},
		// What rewrites or erases a run (its history is its audit trail): operators only.
		{"ResetWorkflowExecution", &workflowservice.ResetWorkflowExecutionRequest{Namespace: "default"},
			[]string{"operator", "admin"}},
		{"TerminateWorkflowExecution", &workflowservice.TerminateWorkflowExecutionRequest{Namespace: "default"},
			[]string{"operator", "admin"}},
		{"DeleteWorkflowExecution", &workflowservice.DeleteWorkflowExecutionRequest{Namespace: "default"},
			[]string{"operator", "admin"}},
		{"StartBatchOperation", &workflowservice.StartBatchOperationRequest{Namespace: "default"},
			[]string{"operator", "admin"}},
		{"StopBatchOperation", &workflowservice.StopBatchOperationRequest{Namespace: "default"},
			[]string{"operator", "admin"}},
		{"RequestCancelWorkflowExecution", &workflowservice.RequestCancelWorkflowExecutionRequest{Namespace: "default"},
			[]string{"service", "admin"}},
		{"ResetStickyTaskQueue", &workflowservice.ResetStickyTaskQueueRequest{Namespace: "default"},
			[]string{"approver", "service", "admin"}},
		{"PollWorkflowTaskQueue", &workflowservice.PollWorkflowTaskQueueRequest{Namespace: "default"},
			[]string{"service", "admin"}},
		// A worker's heartbeat says whether it stopped (`tower approve` and `tower state` read
		// it): only Tower's services may write one.
		{"RecordWorkerHeartbeat", &workflowservice.RecordWorkerHeartbeatRequest{Namespace: "default"},
			[]string{"service", "admin"}},
		{"ShutdownWorker", &workflowservice.ShutdownWorkerRequest{Namespace: "default"},
			[]string{"service", "admin"}},
		// Namespace changes: the cluster's administrator only.
		{"UpdateNamespace", &workflowservice.UpdateNamespaceRequest{Namespace: "default"}, []string{"admin"}},
		{"DeprecateNamespace", &workflowservice.DeprecateNamespaceRequest{Namespace: "default"}, []string{"admin"}},
		{"RegisterNamespace", &workflowservice.RegisterNamespaceRequest{Namespace: "default"}, []string{"admin"}},
	}
	for _, c := range cases {
		allowed := map[string]bool{}
		for _, name := range c.allowed {
			allowed[name] = true
		}
		namespace := ""
		if r, ok := c.request.(interface{ GetNamespace() string }); ok {
			namespace = r.GetNamespace()
		}
		for name, claims := range who {
			got, err := a.Authorize(context.Background(), claims, &authorization.CallTarget{
				APIName: api.WorkflowServicePrefix + c.method, Namespace: namespace, Request: c.request})
			if err != nil {
				t.Fatal(err)
			}
			if (got.Decision == authorization.DecisionAllow) != allowed[name] {
				t.Errorf("%s by %s (%v): decision %v, reason %q", c.method, name, c.request,
					got.Decision, got.Reason)
			}
		}
	}
	if _, err := newTowerAuthorizer("", "tower"); err == nil {
		t.Error("an authorizer without agents was made")
	}
}

// Tokens: only ones signed by a listed key, with an expiry, naming known roles.
func TestTokenMapper(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	dir := t.TempDir()
	pub, _ := key.PublicKey.Bytes() // 0x04 || x || y
	b64 := base64.RawURLEncoding.EncodeToString
	set, _ := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "EC", "crv": "P-256", "kid": "k1", "x": b64(pub[1:33]), "y": b64(pub[33:])}}})
	file := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(file, set, 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := newTokenMapper(file, "", "tower-test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newTokenMapper(file, "", " "); err == nil {
		t.Error("a token mapper without an audience was made")
	}
	exp := time.Now().Add(time.Hour).Unix()
	sign := func(method jwt.SigningMethod, kid string, signer any, body jwt.MapClaims) string {
		token := jwt.NewWithClaims(method, body)
		token.Header["kid"] = kid
		text, err := token.SignedString(signer)
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + text
	}
	good := jwt.MapClaims{"sub": "alice", "aud": "tower-test", "exp": exp,
		"permissions": []string{"default:requester"}}
	claims, err := m.GetClaims(&authorization.AuthInfo{AuthToken: sign(jwt.SigningMethodES256, "k1", key, good)})
	if err != nil || claims.Subject != "alice" || claims.Extensions.(towerGrants)["default"] != roleRequester {
		t.Fatalf("a good token: %v %v", claims, err)
	}
	among := jwt.MapClaims{"sub": "pat", "aud": []string{"elsewhere", "tower-test"}, "exp": exp,
		"permissions": []string{"default:approver"}}
	claims, err = m.GetClaims(&authorization.AuthInfo{AuthToken: sign(jwt.SigningMethodES256, "k1", key, among)})
	if err != nil || claims.Extensions.(towerGrants)["default"] != roleApprover {
		t.Fatalf("a token whose aud lists ours among others: %v %v", claims, err)
	}
	with := func(edit func(jwt.MapClaims)) jwt.MapClaims {
		body := jwt.MapClaims{}
		for k, v := range good {
			body[k] = v
		}
		edit(body)
		return body
	}
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, good).SignedString(jwt.UnsafeAllowNoneSignatureType)
	refused := map[string]string{
		"foreign key":  sign(jwt.SigningMethodES256, "k1", other, good),
		"unknown kid":  sign(jwt.SigningMethodES256, "k2", key, good),
		"alg none":     "Bearer " + none,
		"HMAC":         sign(jwt.SigningMethodHS256, "k1", pub, good),
		"no exp":       sign(jwt.SigningMethodES256, "k1", key, with(func(b jwt.MapClaims) { delete(b, "exp") })),
		"expired":      sign(jwt.SigningMethodES256, "k1", key, jwt.MapClaims{"sub": "a", "exp": time.Now().Add(-time.Minute).Unix()}),
		"no sub":       sign(jwt.SigningMethodES256, "k1", key, jwt.MapClaims{"exp": exp}),
		"unknown role": sign(jwt.SigningMethodES256, "k1", key, jwt.MapClaims{"sub": "a", "exp": exp, "permissions": []string{"default:god"}}),
		"not bearer":   "Basic abc",
		"other audience": sign(jwt.SigningMethodES256, "k1", key, with(func(b jwt.MapClaims) {
			b["aud"] = "grafana"
		})),
		"no audience": sign(jwt.SigningMethodES256, "k1", key, with(func(b jwt.MapClaims) {
			delete(b, "aud")
		})),
	}
	for what, header := range refused {
		if claims, err := m.GetClaims(&authorization.AuthInfo{AuthToken: header}); err == nil {
			t.Errorf("%s: accepted as %+v", what, claims)
		}
	}
	private, _ := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "EC", "crv": "P-256", "kid": "k1", "x": b64(pub[1:33]), "y": b64(pub[33:]), "d": "AAAA"}}})
	if err := os.WriteFile(file, private, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := newTokenMapper(file, "", "tower-test"); err == nil {
		t.Error("a JWKS file holding a private key was accepted")
	}
}
