"""The import structure holds: no cycles between modules, function-local imports only where a reason is
written down (and tested), and a command line that never imports TensorFlow."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from typing import Any, Dict, Iterator, List, Set, Tuple

from repo import ROOT

PACKAGES = ("estimator_lib", "components", "pipelines")

# Where a function-local import is needed, and why. Anything else imports at the top of its module.
COMPONENT_BODY = "KFP ships only a component function's source to the container: its imports live in its body"
LAZY_GCS = "google-cloud-storage loads only when a gs:// URI is used (test_storage_alone_loads_no_cloud_client)"
LAZY_VERTEX = (
    "the Vertex AI SDKs take seconds to import and only TPU compiles, submit and schedule use them "
    "(test_the_cli_and_a_cpu_compile_never_import_the_vertex_extra)"
)
LAZY_BEAM = "Apache Beam takes about 1 s to import: only a stage that runs on the beam engine loads it"
ALLOWED_LOCAL_IMPORTS: Dict[Tuple[str, str], str] = {
    ("estimator_lib.engine.sources", "beam_passes"): LAZY_BEAM,
    ("estimator_lib.engine.sources", "predict"): LAZY_BEAM,
    ("components.resolve", "resolve_inputs"): COMPONENT_BODY,
    ("components.prepare", "prepare_data"): COMPONENT_BODY,
    ("components.train", "train_model"): COMPONENT_BODY,
    ("components.evaluate", "evaluate_model"): COMPONENT_BODY,
    ("components.batch_predict", "batch_predict"): COMPONENT_BODY,
    ("components.export", "export_model"): COMPONENT_BODY,
    ("components.register", "register_model"): COMPONENT_BODY,
    ("components.experiment", "join_experiment"): COMPONENT_BODY,
    ("components.release", "release_model"): COMPONENT_BODY,
    ("components.serving_check", "check_serving"): COMPONENT_BODY,
    ("components.notify", "notify_webhook"): COMPONENT_BODY,
    ("components.run_cost", "record_run_cost"): COMPONENT_BODY,
    ("estimator_lib.storage", "_client"): LAZY_GCS,
    ("estimator_lib.storage", "_retry"): LAZY_GCS,
    ("estimator_lib.storage", "replace_if_unchanged"): LAZY_GCS,
    ("estimator_lib.storage", "_named_errors"): LAZY_GCS,
    ("pipelines.vertex", "build_job"): LAZY_VERTEX,
    ("pipelines.pipeline", "_on_tpu"): LAZY_VERTEX,
    ("pipelines.pipeline", "_exit_task"): LAZY_VERTEX,
    ("estimator_lib.cloud.tasks", "read_task_details"): (
        "only the run-cost and exit tasks on Vertex AI read a PipelineJob; the CLI's --dry-run estimate and local runs "
        "never import the Vertex AI SDK, which takes seconds to import"
    ),
    ("pipelines.cli.vertex_commands", "_vertex_job"): (
        "only a submit or schedule stages a user's code (estimator_lib.model.user loads TensorFlow); every other "
        "command stays TensorFlow-free (test_the_command_line_never_imports_tensorflow)"
    ),
    ("pipelines.cli.preflight", "run_preflight"): (
        "only a preflight (its command, submit, schedule) prepares data and builds the model, which loads TensorFlow; "
        "every other command stays TensorFlow-free (test_the_command_line_never_imports_tensorflow)"
    ),
    ("pipelines.cli.commands", "cmd_release"): (
        "estimator_lib.release loads TensorFlow (its export stage); every other command stays TensorFlow-free "
        "(test_the_command_line_never_imports_tensorflow)"
    ),
    ("components.tuning", "trial_pool"): COMPONENT_BODY,
    ("components.tuning", "best_train_spec"): COMPONENT_BODY,
    ("pipelines.tuning_job", "study_spec"): LAZY_VERTEX,
    ("pipelines.tuning_job", "add_tuning_job"): LAZY_VERTEX,
    ("pipelines.cli.commands", "cmd_predict"): (
        "predict loads TensorFlow; every other command stays TensorFlow-free "
        "(test_the_command_line_never_imports_tensorflow)"
    ),
    ("estimator_lib.engine.published", "_on_beam"): LAZY_BEAM,
    ("estimator_lib.engine.published", "_user_predictions"): LAZY_BEAM,
    ("pipelines.cli.commands", "cmd_tune"): (
        "tune trains in-process (TensorFlow) with optuna, an optional extra ([tune]); every other command stays "
        "TensorFlow-free (test_the_command_line_never_imports_tensorflow)"
    ),
    ("estimator_lib.fingerprints", "canonical_graphs"): (
        "only a SavedModel's graphs need TensorFlow's protos; the other fingerprints (JSON digests in manifests) stay "
        "TensorFlow-free for the command line (test_the_command_line_never_imports_tensorflow)"
    ),
    ("pipelines.runner", "main"): (
        "the runner starts the run's stage server first, so that the server's imports overlap its own "
        "(tests/pipelines/test_stage.py::test_the_runner_starts_the_stage_server_before_its_own_imports)"
    ),
}


def _modules() -> Dict[str, str]:
    """{dotted module name: file} for every module of the three packages (a package is its __init__)."""
    out = {}
    for package in PACKAGES:
        for directory, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(directory, name)
                    dotted = os.path.relpath(path, ROOT)[: -len(".py")].replace(os.sep, ".")
                    out[dotted.removesuffix(".__init__")] = path
    return out


def _imported_names(tree: ast.AST) -> Iterator[Tuple[ast.AST, List[str]]]:
    """(import node, the dotted names it may load) for every import anywhere in `tree`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield node, [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node, [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]


def _ancestors(name: str) -> List[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _graph(modules: Dict[str, str]) -> Dict[str, Set[str]]:
    """module -> the project modules it imports, top-level or inside functions. Importing `a.b.c` also runs
    the packages `a.b` and `a` first, except those `module` itself lives in (already initialised)."""
    graph: Dict[str, Set[str]] = {}
    for module, path in modules.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        own = set(_ancestors(module)) | ({module} if path.endswith("__init__.py") else set())
        edges = set()
        for _, names in _imported_names(tree):
            for name in names:
                for target in [name, *_ancestors(name)]:
                    if target in modules and target not in own and target != module:
                        edges.add(target)
        graph[module] = edges
    return graph


def _find_cycle(graph: Dict[str, Set[str]]) -> List[str]:
    """One import cycle as [a, b, ..., a], or [] when there is none."""
    state: Dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: List[str] = []

    def visit(node: str) -> List[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return []


def test_the_cycle_finder_finds_a_cycle():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) == []


def _analysis() -> Dict[str, Any]:
    """{"graph": module -> imported modules, "local": "module:function" -> function-local imports}.

    Parsed in a fresh interpreter (`python tests/test_imports.py`): in a test process that has already run
    TensorFlow, CPython 3.11's `ast.parse` can fail with "AST constructor recursion depth mismatch"."""
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__)], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _local_imports(modules: Dict[str, str]) -> Dict[str, List[str]]:
    found: Dict[str, List[str]] = {}
    for module, path in modules.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for function in ast.walk(tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node, names in _imported_names(function):
                    found.setdefault(f"{module}:{function.name}", []).append(f"line {node.lineno}: {names[0]}")
    return found


def test_no_module_imports_itself_back():
    graph = {module: set(edges) for module, edges in _analysis()["graph"].items()}
    assert len(graph) > 50 and "estimator_lib.predict.saved_model" in graph  # the walk saw the whole tree
    assert "estimator_lib.export" in graph["estimator_lib.predict.saved_model"]  # edges are seen
    cycle = _find_cycle(graph)
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_function_local_imports_only_where_a_reason_is_written():
    found = {tuple(key.split(":")): lines for key, lines in _analysis()["local"].items()}
    unexplained = {key: lines for key, lines in found.items() if key not in ALLOWED_LOCAL_IMPORTS}
    assert not unexplained, f"import these at the top of their module (or add a tested reason): {unexplained}"
    assert set(ALLOWED_LOCAL_IMPORTS) <= set(found), "a listed reason no longer applies: drop it"


def _fresh_python(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": ROOT}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


# Modules a fresh interpreter loads beyond those it starts with (site's .pth files may preload namespaces).
BEFORE = "import sys; _before = set(sys.modules)\n"
LOADED = "print(sorted(m for m in set(sys.modules) - _before if m.split('.')[0] in {names!r}))"


def test_the_command_line_never_imports_tensorflow():
    code = BEFORE + (
        "import pipelines.cli as cli\n"
        "args = cli.build_parser().parse_args(['run-local', '--set', 'training.train_steps=5'])\n"
        "cli.resolve_settings(args, '/tmp/published')\n" + LOADED.format(names={"tensorflow", "tensorflow_estimator"})
    )
    assert _fresh_python(code) == "[]"


def test_show_loads_no_tensorflow(tmp_path):
    """`tpu-pipeline show` reads a run's record: it starts as fast as the rest of the command line."""
    folder = os.path.join(str(tmp_path), "runs", "r1")
    os.makedirs(folder)
    recorded = os.path.join(os.path.dirname(__file__), "pipelines", "recorded_summary.json")  # a real run's summary
    shutil.copy(recorded, os.path.join(folder, "summary.json"))
    code = BEFORE + (
        "import pipelines.cli as cli\n"
        f"assert cli.main(['show', 'r1', '--output', {str(tmp_path)!r}]) == 0\n"
        + LOADED.format(names={"tensorflow", "tensorflow_estimator"})
    )
    assert _fresh_python(code).splitlines()[-1] == "[]"


def test_storage_alone_loads_no_cloud_client():
    code = (
        BEFORE + "import estimator_lib.storage, estimator_lib.config\n" + LOADED.format(names={"google", "tensorflow"})
    )
    assert _fresh_python(code) == "[]"


if __name__ == "__main__":  # the parse, in a fresh interpreter (see _analysis)
    modules = _modules()
    graph = {module: sorted(edges) for module, edges in _graph(modules).items()}
    print(json.dumps({"graph": graph, "local": _local_imports(modules)}))
