"""Durable jobs on the local engine: each durable job's function run by AWS's durable execution testing SDK
(aws-durable-execution-sdk-python-testing), in this process, with no AWS.

The SDK's DurableFunctionTestRunner is Lambda's durable execution service in miniature: it invokes the handler,
takes its checkpoints, replays it after waits and step retries, and times the execution out. Two things Lambda
does and the runner doesn't, this module adds:
- an execution's name is its idempotency key: a start under a known name returns the known execution when the
  payload is the same, and refuses it (None, as DurableExecutionAlreadyStartedException) when it differs
  (the Invoke API's DurableExecutionName);
- checkpoints outlive the process: each function's executions are kept in a SQLite store (the SDK's
  SQLiteExecutionStore) under `state_dir`, and `resume()` starts again every execution a killed process left
  RUNNING, from its last checkpoint (the step it was in runs again from its start, as on Lambda when an
  invocation is lost: the SDK's steps are at-least-once).
It is also the workers' DurableExecutions (sqs_jobs.durable.executions), what their heartbeat's sweep asks:
the runner's own answers to ListDurableExecutionsByFunction, GetDurableExecution and GetDurableExecutionHistory, in
those APIs' shapes; and `stop()` is StopDurableExecution.
And `serve_callbacks()` serves Lambda's callback API (SendDurableExecutionCallbackSuccess, ...Failure, ...Heartbeat)
and StopDurableExecution over HTTP with the testing SDK's own web server, so an event's sender (sqs_jobs.events: a
service, jobctl) and `jobctl job cancel` call them with an ordinary boto3 Lambda client whose endpoint is that
server's URL.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aws_durable_execution_sdk_python.execution import durable_execution
from aws_durable_execution_sdk_python_testing import DurableFunctionTestRunner
from aws_durable_execution_sdk_python_testing.execution import Execution
from aws_durable_execution_sdk_python_testing.runner import DurableFunctionTestResult
from aws_durable_execution_sdk_python_testing.stores.sqlite import SQLiteExecutionStore

from sqs_jobs.durable.executions import (
    ENDED_UNSUCCESSFULLY,
    EndedExecution,
    ExecutionEnd,
    RuntimeSteps,
    end_of,
    ended_of,
    runtime_steps_of,
)
from sqs_jobs.durable.runtime import DurableRuntime

RUNNING = "RUNNING"


@dataclass
class LocalDurableFunction:
    job: str
    function_name: str
    execution_timeout_s: int
    store: SQLiteExecutionStore
    runner: DurableFunctionTestRunner


class LocalDurableFunctions:
    """The durable functions of a deployment's durable jobs; a DurableStarter for the local workers."""

    def __init__(
        self,
        runtimes: Mapping[str, tuple[str, DurableRuntime]],
        state_dir: Path | None = None,
        *,
        skip_time: bool = False,
    ) -> None:
        """`runtimes`: per durable job, its function's name and the runtime its executions run in. `state_dir`:
        where the executions' stores are kept (a fresh temporary directory when None). `skip_time`: waits and
        retry delays pass at once (tests), rather than in real time (as on Lambda)."""
        # A closed runner's last writes may still land in it: the clean-up must not fail the caller then.
        self._temporary = (
            tempfile.TemporaryDirectory(prefix="durable-", ignore_cleanup_errors=True) if state_dir is None else None
        )
        self.state_dir = Path(self._temporary.name) if self._temporary is not None else state_dir
        assert self.state_dir is not None
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._callback_server: Any = None
        self.functions: dict[str, LocalDurableFunction] = {}
        for job, (function_name, runtime) in runtimes.items():
            durable = runtime.settings.worker.queue.job(job).durable
            assert durable is not None
            store = SQLiteExecutionStore.create_and_initialize(self.state_dir / f"{function_name}.db")
            runner = DurableFunctionTestRunner(
                durable_execution(runtime.run),
                execution_timeout=durable.execution_timeout_s,
                invocation_timeout=durable.function_timeout_s,
                store=store,
                skip_time=skip_time,
            )
            self.functions[job] = LocalDurableFunction(job, function_name, durable.execution_timeout_s, store, runner)

    # --- DurableStarter -----------------------------------------------------------------------------------------

    def start(self, job: str, name: str, payload: str) -> str | None:
        function = self.functions[job]
        with self._lock:  # one start per name at a time, as Lambda's names are unique
            known = self._named(function, name)
            if known is not None:
                return known.durable_execution_arn if known.start_input.input == payload else None
            return function.runner.run_async(
                input=payload,
                execution_timeout=function.execution_timeout_s,
                function_name=function.function_name,
                execution_name=name,
            )

    # --- DurableExecutions --------------------------------------------------------------------------------------

    def ended(self, job: str, started_after: datetime) -> list[EndedExecution]:
        function = self.functions[job]
        found: list[EndedExecution] = []
        for status in ENDED_UNSUCCESSFULLY:  # the runner filters by one status at a time
            marker: str | None = None
            while True:
                response = self._executor(job).list_executions_by_function(
                    function.function_name,
                    status_filter=status,
                    started_after=started_after.isoformat(),
                    marker=marker,
                    max_items=1000,
                )
                found.extend(ended_of(summary) for summary in response.to_dict()["DurableExecutions"])
                marker = response.next_marker
                if marker is None:
                    break
        return found

    def end_of(self, job: str, arn: str) -> ExecutionEnd:
        return end_of(self._executor(job).get_execution_details(arn).to_dict())

    def runtime_steps(self, job: str, arn: str) -> RuntimeSteps:
        history = self.functions[job].runner.get_execution_history(arn, include_execution_data=True)
        return runtime_steps_of(history.to_dict()["Events"])

    def stop(self, job: str, arn: str, message: str = "stopped by an operator") -> None:
        """StopDurableExecution: the execution ends STOPPED, whatever it was doing."""
        from aws_durable_execution_sdk_python.lambda_service import ErrorObject

        self._executor(job).stop_execution(arn, ErrorObject.from_message(message))

    def _executor(self, job: str) -> Any:
        """The runner's executor: Lambda's durable execution service in miniature, which the runner's public calls
        use too (pinned with the SDK, as `_relaunch` is)."""
        return self.functions[job].runner._executor

    # --- the engine's part ------------------------------------------------------------------------------------

    def resume(self) -> list[str]:
        """Start again every execution a previous process left RUNNING in the stores; their ARNs."""
        resumed: list[str] = []
        for function in self.functions.values():
            executions, _ = function.store.query(function_name=function.function_name, status_filter=RUNNING)
            for execution in executions:
                _relaunch(function.runner, execution, function.execution_timeout_s)
                resumed.append(execution.durable_execution_arn)
        return resumed

    def execution(self, job: str, arn: str) -> Execution:
        return self.functions[job].store.load(arn)

    def executions(self, job: str) -> list[Execution]:
        function = self.functions[job]
        found, _ = function.store.query(function_name=function.function_name)
        return found

    def wait(self, job: str, arn: str, timeout_s: float) -> Any:
        """The execution's result once it ends (DurableFunctionTestResult), or TimeoutError. An execution that
        already ended is answered from the store: the runner's completion event serves only its first waiter."""
        function = self.functions[job]
        execution = function.store.load(arn)
        if execution.is_complete:
            return DurableFunctionTestResult.create(execution=execution)
        return function.runner.wait_for_result(arn, timeout=int(timeout_s))

    def serve_callbacks(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Start serving Lambda's callback API and StopDurableExecution for every function's executions (the testing
        SDK's WebServer, in a thread of its own) and return its URL; the same URL when already serving. Only those
        routes are served: the server's others answer an error."""
        if self._callback_server is None:
            from aws_durable_execution_sdk_python_testing.web.server import WebServer, WebServiceConfig

            server = WebServer(WebServiceConfig(host=host, port=port), _CallbackRouter(self))  # type: ignore[arg-type]
            server.RequestHandlerClass = _error_typed(server.RequestHandlerClass)
            threading.Thread(target=server.serve_forever, name="durable-callbacks", daemon=True).start()
            self._callback_server = server
        address = self._callback_server.server_address
        return f"http://{address[0]}:{address[1]}"

    def callbacks_client(self, region: str) -> Any:
        """A boto3 Lambda client at `serve_callbacks()`, as a service's sender builds one (any credentials do)."""
        import boto3

        return boto3.client(
            "lambda",
            region_name=region,
            endpoint_url=self.serve_callbacks(),
            aws_access_key_id="local",
            aws_secret_access_key="local",
        )

    def function_of(self, execution_arn: str) -> LocalDurableFunction:
        """The function an execution is of (KeyError: none here)."""
        from aws_durable_execution_sdk_python_testing.exceptions import ResourceNotFoundException

        for function in self.functions.values():
            try:
                function.store.load(execution_arn)
            except ResourceNotFoundException:
                continue
            return function
        raise KeyError(execution_arn)

    def close(self) -> None:
        if self._callback_server is not None:
            self._callback_server.shutdown()
            self._callback_server.server_close()
            self._callback_server = None
        for function in self.functions.values():
            function.runner.close()  # type: ignore[no-untyped-call]
        if self._temporary is not None:
            self._temporary.cleanup()

    @staticmethod
    def _named(function: LocalDurableFunction, name: str) -> Execution | None:
        found, _ = function.store.query(function_name=function.function_name, execution_name=name, limit=1)
        return found[0] if found else None


def _relaunch(runner: DurableFunctionTestRunner, execution: Execution, execution_timeout_s: int) -> None:
    """Hand a stored RUNNING execution to this runner's executor as if it had just been started: its timeout armed
    for what is left of it, its next invocation scheduled now. The runner has no public call for it (it keeps its
    executions in one process); `_launch_execution` is what its own start_execution calls after storing a new one.
    Pinned with the SDK (pyproject: <2) and tested (tests/functional/test_durable_jobs.py, and bench.durable_import
    with a real SIGKILL)."""
    started = execution.get_operation_execution_started().start_timestamp
    elapsed_s = (datetime.now(UTC) - started).total_seconds() if started else 0.0
    left_s = max(1, int(execution_timeout_s - elapsed_s))
    launch: Callable[[Execution, int], None] = runner._executor._launch_execution
    launch(execution, left_s)


class _CallbackRouter:
    """What the testing SDK's web server asks of its executor for the callback routes and StopDurableExecution, each
    sent on to the executor of the function whose execution it names (a callback ID names its execution: the SDK's
    CallbackToken). A callback or an execution not here is ResourceNotFoundException, as Lambda answers."""

    def __init__(self, functions: LocalDurableFunctions) -> None:
        self._functions = functions

    def send_callback_success(self, callback_id: str, result: bytes | None = None) -> Any:
        return self._executor_of(callback_id).send_callback_success(callback_id=callback_id, result=result)

    def send_callback_failure(self, callback_id: str, error: Any = None) -> Any:
        return self._executor_of(callback_id).send_callback_failure(callback_id=callback_id, error=error)

    def send_callback_heartbeat(self, callback_id: str) -> Any:
        return self._executor_of(callback_id).send_callback_heartbeat(callback_id=callback_id)

    def stop_execution(self, execution_arn: str, error: Any = None) -> Any:
        from aws_durable_execution_sdk_python_testing.exceptions import ResourceNotFoundException

        try:
            function = self._functions.function_of(execution_arn)
        except KeyError as missing:
            raise ResourceNotFoundException(f"no durable execution {execution_arn[:200]!r}") from missing
        return function.runner._executor.stop_execution(execution_arn, error)

    def _executor_of(self, callback_id: str) -> Any:
        from aws_durable_execution_sdk_python_testing.exceptions import ResourceNotFoundException
        from aws_durable_execution_sdk_python_testing.token import CallbackToken

        try:
            arn = CallbackToken.from_str(callback_id).execution_arn
            function = self._functions.function_of(arn)
        except (KeyError, ValueError) as error:
            raise ResourceNotFoundException(f"no durable execution has callback {callback_id[:64]!r}") from error
        return function.runner._executor


def _error_typed(handler: Any) -> Any:
    """The testing SDK's request handler, its error answers also naming their error in the `x-amzn-ErrorType`
    header, where Lambda names it and botocore reads it: the server writes the name only in the body's `Type`,
    which botocore doesn't read, so every refusal would reach a client as a bare status ("404") that a wrong
    endpoint answers too (sqs_jobs.events tells the two apart by the code)."""
    import json

    class ErrorTyped(handler):  # type: ignore[misc]
        def _send_response(self, response: Any) -> None:
            if response.status_code >= 400 and "x-amzn-ErrorType" not in response.headers:
                try:
                    error_type = json.loads(response.body_to_bytes() or b"{}").get("Type")
                except (AttributeError, TypeError, ValueError):
                    error_type = None
                if isinstance(error_type, str) and error_type:
                    response.headers["x-amzn-ErrorType"] = error_type
            super()._send_response(response)

    return ErrorTyped
