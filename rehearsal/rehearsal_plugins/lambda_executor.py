"""A Lambda runtime executor that runs nothing: functions deploy and turn Active, invokes fail."""

from typing import Any, NoReturn

from localstack.services.lambda_.invocation.plugins import RuntimeExecutorPlugin
from localstack.services.lambda_.invocation.runtime_executor import LambdaRuntimeException, RuntimeExecutor


class NoRuntimeExecutor(RuntimeExecutor):
    # The default (Docker) executor downloads a runtime binary in prepare_version, which CreateFunction awaits.
    @classmethod
    def prepare_version(cls, function_version: Any) -> None:
        pass

    @classmethod
    def cleanup_version(cls, function_version: Any) -> None:
        pass

    def start(self, env_vars: dict[str, str]) -> NoReturn:
        raise LambdaRuntimeException("the deploy rehearsal runs no Lambda functions")

    def stop(self) -> None:
        pass

    def get_address(self) -> str:
        return "127.0.0.1"

    def get_endpoint_from_executor(self) -> str:
        return "127.0.0.1"

    def get_runtime_endpoint(self) -> str:
        return ""

    def invoke(self, payload: dict[str, str]) -> NoReturn:
        raise LambdaRuntimeException("the deploy rehearsal runs no Lambda functions")

    def get_logs(self) -> str:
        return ""


class NoRuntimeExecutorPlugin(RuntimeExecutorPlugin):
    name = "rehearsal"

    def load(self, *args: Any, **kwargs: Any) -> type[RuntimeExecutor]:
        return NoRuntimeExecutor
