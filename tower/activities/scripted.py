"""The built-in scripted model: deterministic answers, so everything runs offline.

Used when no OPENAI_API_KEY is set; it answers as model ``scripted`` so no output passes
for a real model's. Each agent attaches its nodes' scripts (``@agent(GRAPH, scripts=...)``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from temporalio.exceptions import ApplicationError

from tower.contract.failures import Code, TowerError, failure
from tower.contract.wire import ModelReply, ModelRequest, ToolCallRequest
from tower.core.state import Usage

# A node's script: the request in, the model's content (or one tool call) out.
Script = Callable[[ModelRequest], "str | ToolCallRequest"]


SCRIPTED_MODEL = "scripted"
# (agent, node) -> script. The worker builds it from the agents' files
# (``tower.scripts_of``): each agent names its own scripts with ``@agent(GRAPH, scripts=...)``.
Scripts = Mapping[tuple[str, str], Script]


def scripted_reply(request: ModelRequest, scripts: Scripts) -> ModelReply:
    script = scripts.get((request.agent, request.node))
    if script is None:
        answer: str | ToolCallRequest = (
            f"(the scripted model has no script for {request.agent}/{request.node})")
    else:
        try:
            answer = script(request)
        except ApplicationError:
            raise  # the script stands in for a model failure on purpose: classified already
        except Exception as exc:  # a bug in the project, not an outage: it fails at once
            name = getattr(script, "__qualname__", repr(script))
            raise failure(TowerError(
                f"the scripted model's script for {request.agent}/{request.node} ({name}) "
                f"raised {type(exc).__name__}: {exc}", code=Code.SCRIPT_FAILED)) from exc
    prompt_chars = len(request.system) + sum(len(m.content) for m in request.messages)
    if isinstance(answer, ToolCallRequest):
        text, reply = json.dumps(answer.arguments), ModelReply(model=SCRIPTED_MODEL,
                                                               tool_calls=[answer])
    else:
        text, reply = answer, ModelReply(model=SCRIPTED_MODEL, content=answer)
    # A rough 4-characters-a-token estimate, so budgets and reports have figures offline.
    reply.usage = Usage(calls=1, prompt_tokens=prompt_chars // 4 + 1,
                        completion_tokens=len(text) // 4 + 1)
    return reply
