// A refund through Tower's AG-UI endpoint with the official client (@ag-ui/client):
// the first message, the interrupt, a resume the endpoint signs for the signed-in user.
// Prints what the client saw as one JSON object. Usage: node drive.mjs URL THREAD USER
import { HttpAgent, buildResumeArray } from "@ag-ui/client";

const [url, threadId, user] = process.argv.slice(2);
const agent = new HttpAgent({
  url, threadId, headers: { "X-Forwarded-User": user },
  initialMessages: [{ id: "u1", role: "user", content: "Please refund $1,200 on invoice INV-2004" }],
});
const runs = [];
const watch = () => {
  const run = { events: [], errors: [] };
  runs.push(run);
  return {
    onEvent: ({ event }) => { run.events.push(event.type); },
    onRunErrorEvent: ({ event }) => { run.errors.push({ code: event.code, message: event.message }); },
  };
};

await agent.runAgent({}, watch());
const interrupts = agent.pendingInterrupts;
const [first] = interrupts;
const resume = buildResumeArray(interrupts, {
  [first.id]: { status: "resolved", payload: { verdict: "approve", note: "ok from node" } },
});
const result = await agent.runAgent({ resume }, watch());
console.log(JSON.stringify({
  interrupt: first, runs, result: result.result, state: agent.state,
  pending: agent.pendingInterrupts, messages: agent.messages.map((m) => m.role),
}));
