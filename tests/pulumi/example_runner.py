"""Run a Pulumi program directory under the SDK's mocks and print what it registered, as JSON.

`python example_runner.py DIR [KEY=SECRET ...]` (stack secrets, as `pulumi config set --secret`):
used by tests/pulumi/test_packaging.py with a fresh venv's python,
so it imports nothing from this repository (only pulumi and what the venv installed).
"""

import json
import runpy
import sys
from pathlib import Path
from typing import Any

import pulumi


class Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], None]:
        return {}, None


def main(program: Path, secrets: dict[str, str]) -> None:
    registered: list[str] = []
    exports: dict[str, Any] = {}
    mocks = Mocks()

    class Monitor(pulumi.runtime.mocks.MockMonitor):
        def RegisterResource(self, request: Any) -> Any:
            registered.append(f"{request.type} {request.name}")
            return super().RegisterResource(request)

    pulumi.runtime.set_mocks(mocks, project="example", stack="dev", preview=False, monitor=Monitor(mocks))
    keys = {f"example:{key}": value for key, value in secrets.items()}
    pulumi.runtime.set_all_config(keys, list(keys))
    pulumi.export = lambda key, value: exports.__setitem__(key, value)  # type: ignore[assignment]

    @pulumi.runtime.test
    def run() -> Any:
        sys.path.insert(0, str(program))
        runpy.run_path(str(program / "__main__.py"), run_name="__main__")
        return pulumi.Output.from_input(exports).apply(lambda values: exports.update(values))

    run()
    import kafka_mirror

    print(
        json.dumps(
            {"kafka_mirror": kafka_mirror.__file__, "resources": registered, "exports": exports},
            indent=2,
            sort_keys=True,
            default=str,
        )
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve(), dict(arg.split("=", 1) for arg in sys.argv[2:]))
