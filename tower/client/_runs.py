"""Runs from a client: start one with its search attributes, ask it (a worker answers),
and read how a closed run ended and why, by the contract's names (``tower.contract.names``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import TaskQueueType, WorkerStatus
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    ListWorkersRequest,
    ResetStickyTaskQueueRequest,
)
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateStage,
)
from temporalio.service import RPCError, RPCStatusCode

from tower.client.connection import TASK_QUEUE
from tower.client.errors import ClientError, NeverStarted, RunClosed, RunNotFound, RunUnreadable
from tower.contract import names, search
from tower.contract.failures import Code, rebuilt
from tower.core.details import start_metadata

if TYPE_CHECKING:
    from tower.temporal.replay import Replayed

# A worker answers a query in milliseconds; past this, none is there (the server still
# lists a worker that stopped a minute ago as a poller).
QUERY_TIMEOUT = timedelta(seconds=10)
# While waiting for a takeover, each try is this short: a worker that answers, answers fast.
TAKEOVER_TRY = timedelta(seconds=4)


async def start_run(client: Client, agent: type[Any], request: Any, *, id: str,
                    task_queue: str = TASK_QUEUE, **options: Any) -> WorkflowHandle[Any, Any]:
    """Start a run of ``agent`` with the search attributes of its first move set
    (``search.start_attributes``: one event fewer, listed from its first moment) and the Web
    UI's summary and details, unless given. ``options`` go to ``Client.start_workflow``;
    ``task_timeout`` is the agent's own unless given."""
    if agent.task_timeout is not None:
        options.setdefault("task_timeout", agent.task_timeout)
    summary, details = start_metadata(agent.machine, id)
    options.setdefault("static_summary", summary)
    options.setdefault("static_details", details)
    return await client.start_workflow(agent.machine.name, request, id=id,
                                       task_queue=task_queue,
                                       search_attributes=search.start_attributes(agent.machine),
                                       **options)


async def describe(handle: WorkflowHandle[Any, Any]) -> WorkflowExecutionDescription:
    """The run's description from the server (no worker needed); RunNotFound if none."""
    try:
        return await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise RunNotFound(f"run {handle.id!r} not found") from None
        raise


async def has_workers(client: Client, task_queue: str) -> bool:
    """Whether a worker polls ``task_queue`` for workflow tasks, not counting those that
    have since said they stopped."""
    response = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
        namespace=client.namespace, task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW))
    if not response.pollers:
        return False
    stopped = await _stopped_workers(client, task_queue)
    # A poll begun after its identity's worker stopped is another worker's (a process
    # that started a new one): live, even before that worker's first heartbeat.
    return any(poller.identity not in stopped
               or poller.last_access_time.ToDatetime() > stopped[poller.identity]
               for poller in response.pollers)


async def _stopped_workers(client: Client, task_queue: str) -> dict[str, datetime]:
    """Identities on ``task_queue`` whose every heartbeat says they stop, with the time of
    the last (the server lists a stopped worker as a poller for a minute; the SDK's heartbeats
    say it at once). Empty when the server keeps no heartbeats."""
    stopping = (WorkerStatus.WORKER_STATUS_SHUTTING_DOWN, WorkerStatus.WORKER_STATUS_SHUTDOWN)
    live: set[str] = set()
    stopped: dict[str, datetime] = {}
    query = f"TaskQueue = '{task_queue}'" if "'" not in task_queue else ""
    token = b""
    try:
        while True:
            page = await client.workflow_service.list_workers(ListWorkersRequest(
                namespace=client.namespace, query=query, page_size=1000,
                next_page_token=token))
            for worker in page.workers_info:
                beat = worker.worker_heartbeat
                if beat.task_queue != task_queue:
                    continue
                if beat.status in stopping:
                    at = beat.heartbeat_time.ToDatetime()
                    stopped[beat.worker_identity] = max(at, stopped.get(beat.worker_identity, at))
                else:
                    live.add(beat.worker_identity)
            token = page.next_page_token
            if not token:
                return {who: at for who, at in stopped.items() if who not in live}
    except RPCError:  # a server without worker heartbeats (or forbidding their list)
        return {}


def no_worker(run: str, task_queue: str) -> str:
    return (f"run {run!r} is running and only a worker can answer for it, but no worker "
            f"answers on its task queue {task_queue!r}: start one (`python worker.py`), or "
            f"read its recorded steps with `tower inspect {run}`")


async def query(client: Client, handle: WorkflowHandle[Any, Any], query: Any,
                result_type: type | None = None, *, takeover: float = 0,
                say: Callable[[str], None] | None = None) -> Any:
    """Ask a running run ``query``: ClientError naming the missing worker when none answers,
    NeverStarted for a run whose agent refused its input, RunUnreadable when the worker cannot
    answer.

    ``takeover`` (seconds): the server sends a killed worker's run to that worker's sticky
    queue for ~10 s. If a worker polls meanwhile, the run is handed back to the task queue
    (ResetStickyTaskQueue) and asked again until one answers or the time is up; ``say``
    hears why."""
    info = await describe(handle)
    await check_started(handle, info)
    if not await has_workers(client, info.task_queue):
        raise ClientError(no_worker(handle.id, info.task_queue))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + takeover
    wait = TAKEOVER_TRY if takeover else QUERY_TIMEOUT
    while True:
        try:
            return await ask(handle, query, result_type, wait)
        except RunUnreadable as exc:
            # The worker answered that it could not (a store it needs is down, say): within
            # the takeover window that may pass, so ask again; after it, say why.
            left = deadline - loop.time()
            if left <= 0:
                raise
            if say is not None:
                say(f"{exc} — asking again ({left:.0f} s left)")
            await asyncio.sleep(min(5.0, left))  # each try is a line in the worker's log
            continue
        except RPCError as exc:
            if not unanswered(exc):
                raise
        left = deadline - loop.time()
        if left <= 0 or not await has_workers(client, info.task_queue):
            waited = f"{takeover:g}" if takeover else f"{QUERY_TIMEOUT.seconds}"
            raise ClientError(f"{no_worker(handle.id, info.task_queue)} (no answer in "
                              f"{waited} s)") from None
        if say is not None:
            say(f"the worker that ran {handle.id} does not answer (stopped?); handing the "
                f"run to another worker on task queue {info.task_queue!r} "
                f"({left:.0f} s left)")
        # Released from the worker that last ran it: its next task goes to the queue.
        await client.workflow_service.reset_sticky_task_queue(ResetStickyTaskQueueRequest(
            namespace=client.namespace, execution=WorkflowExecution(workflow_id=handle.id)))
        wait = timedelta(seconds=min(QUERY_TIMEOUT.total_seconds(), max(left, 1.0)))


async def ask(handle: WorkflowHandle[Any, Any], query: Any, result_type: type | None = None,
              wait: timedelta = QUERY_TIMEOUT) -> Any:
    """``handle.query``, but a query the worker failed to answer is RunUnreadable."""
    try:
        return await handle.query(query, result_type=result_type, rpc_timeout=wait)
    except WorkflowQueryFailedError as exc:
        raise RunUnreadable(handle.id, f"cannot be read: its worker failed to answer "
                            f"({exc.message})") from None


async def check_started(handle: WorkflowHandle[Any, Any],
                        info: WorkflowExecutionDescription | None = None) -> None:
    """NeverStarted when the run failed because its agent refused its input (read from its
    close event: no worker needed)."""
    info = info or await describe(handle)
    if info.status != WorkflowExecutionStatus.FAILED:
        return
    try:
        await handle.result(follow_runs=False, rpc_timeout=timedelta(seconds=10))
    except WorkflowFailureError as exc:
        why = refusal(exc.cause)
        if why is not None:
            raise NeverStarted(handle.id, why) from None
    except Exception:  # noqa: BLE001  (a failure this process cannot open: not a refusal)
        return


def refusal(error: object) -> str | None:
    """Why the run's agent refused its input, when ``error`` (the run's failure) says so."""
    found = rebuilt(error if isinstance(error, BaseException) else None)
    return found.message if found is not None and found.code == Code.INPUT_REFUSED else None


def unanswered(exc: RPCError) -> bool:
    """The query reached no worker in time (as opposed to a refusal)."""
    return (exc.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.FAILED_PRECONDITION,
                           RPCStatusCode.CANCELLED) or "timeout" in exc.message.lower()
            or "timed out" in exc.message.lower())


async def run_state(client: Client, run: str, *,
                    workflows: Callable[[], Sequence[type]] = tuple) -> dict[str, Any]:
    """RUN's state: a running run's from its ``state`` query (a worker answers), a completed
    run's from its result, any other closed run's from its history replayed here with
    ``workflows()`` (called only then) or, when this code cannot replay it (the agent changed
    since, or none given), from a worker of the code that ran it. NeverStarted for a run
    whose input was refused: it has no state."""
    handle = client.get_workflow_handle(run, result_type=dict)
    info = await describe(handle)
    if info.status == WorkflowExecutionStatus.COMPLETED:
        return await handle.result()
    if not closed(info):
        return await query(client, handle, names.STATE.name, dict)
    await check_started(handle, info)
    replayed = await replay_closed(handle, info, workflows())
    if replayed is not None and not replayed.failure and replayed.states:
        return replayed.states[-1].model_dump(mode="json")
    if not await has_workers(client, info.task_queue):
        why = (replayed.failure or "no transitions") if replayed else "no agents to replay it"
        raise ClientError(f"run {run!r} ended {status_of(info)}, and its history does not "
                          f"replay against this code ({why}); start a worker of the code "
                          "that ran it and ask again")
    return await ask(handle, names.STATE.name, dict)


async def replay_closed(handle: WorkflowHandle[Any, Any], info: WorkflowExecutionDescription,
                        workflows: Sequence[type]) -> Replayed | None:
    """A closed run's history replayed here with ``workflows`` (None: none given)."""
    if not workflows:
        return None
    from tower.temporal.replay import replay

    history = await handle.fetch_history()
    [result] = await replay([(handle.id, history)], workflows=workflows,
                            namespace=info.namespace)
    return result


async def update_while_open(handle: WorkflowHandle[Any, Any], update: Any, *args: Any,
                            timeout: float, poll_seconds: float = 0.5,
                            client: Client | None = None) -> Any:
    """Send ``update`` with ``args`` and wait for its result, but not past the run's end:
    RunClosed as soon as it closes, TimeoutError after ``timeout`` seconds. Given ``client``,
    a ``StoredReply`` carrying only ``reply_ref`` comes back with its text (ReplyMissing)."""
    sent = asyncio.ensure_future(_send(handle, update, list(args), client))
    watch = asyncio.ensure_future(_until_closed(handle, poll_seconds))
    try:
        done, _ = await asyncio.wait({sent, watch}, timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        if sent in done:
            try:
                return sent.result()
            except RPCError:  # the server's answer for a run that closed meanwhile
                info = await describe(handle)
                if not closed(info):
                    raise
        elif watch in done:
            info = watch.result()
        else:
            raise TimeoutError(f"no answer from {handle.id} in {timeout:g} s")
        raise RunClosed(handle.id, status_of(info), await failure_of(handle)) from None
    finally:
        for task in (sent, watch):
            task.cancel()


async def _send(handle: WorkflowHandle[Any, Any], update: Any, args: list[Any],
                client: Client | None) -> Any:
    sent = await handle.start_update(update, args=args,
                                     wait_for_stage=WorkflowUpdateStage.COMPLETED)
    result = await sent.result()
    if client is None:
        return result
    from tower.client._replies import resolved

    # The run that answered (a thread may continue-as-new right after): its history.
    return await resolved(client, handle.id, sent.workflow_run_id, result)


async def _until_closed(handle: WorkflowHandle[Any, Any], poll_seconds: float
                        ) -> WorkflowExecutionDescription:
    while True:
        info = await describe(handle)
        if closed(info):
            return info
        await asyncio.sleep(poll_seconds)


def status_of(info: WorkflowExecutionDescription) -> str:
    return info.status.name if info.status else "UNKNOWN"


def closed(info: WorkflowExecutionDescription) -> bool:
    return info.status not in (None, WorkflowExecutionStatus.RUNNING)


async def failure_of(handle: WorkflowHandle[Any, Any], wait: float = 2.0) -> str | None:
    """Why the run did not complete, from its close event; None for a completed run or one
    still open after ``wait`` seconds."""
    try:
        await handle.result(follow_runs=False, rpc_timeout=timedelta(seconds=wait))
    except WorkflowFailureError as exc:
        from tower.temporal.replay import reason_of

        return reason_of(exc.cause)
    except RPCError as exc:
        if unanswered(exc):
            return None
        raise
    except Exception as exc:  # noqa: BLE001  (continued as new, a codec error: said as is)
        return str(exc) or type(exc).__name__
    return None
