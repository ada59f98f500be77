"""What an agent reference names, imported once per process: a compiled LangGraph graph, a ``StateGraph`` builder, a
factory returning either, or an app ``app(message, *, thread_id) -> dict | list[dict]`` (openevals'
``run_multiturn_simulation`` contract), sync or async.

``graph:MODULE:ATTR`` imports a module (installed, or in the working directory), ``graph:path/to/app.py:ATTR`` a
file (relative to the working directory, as ``langgraph.json`` resolves it: on a Ray worker, the driver's,
:func:`.driver_folder.resolve_files_from`);
``langgraph:URL[#ASSISTANT]`` opens a client of a deployed graph (:mod:`.remote`: a server that does not answer
cannot be loaded); ``app:NAME`` is an object the Python API registered in this process (:func:`register_app`).
Whatever cannot be loaded is a ``ValueError`` with one line naming the reference.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from dyneval.runtime.agents.apps import AgentApp, CallableApp, GraphApp
from dyneval.runtime.driver_folder import files_from, local_path
from dyneval.state.agent import AgentRef, is_agent_ref, parse_agent_ref

_registered: dict[str, Any] = {}
_lock = threading.Lock()


def register_app(app: Any) -> str:
    """An ``app:NAME`` reference to ``app`` (a callable or a graph handed to the Python API), valid in this
    process only (a Ray worker or a resume in another process cannot load it)."""
    name = getattr(app, "name", None) or getattr(app, "__qualname__", None) or type(app).__name__
    with _lock:
        key = f"{name}-{len(_registered) + 1}".replace("?", "_").replace("<", "").replace(">", "")
        _registered[key] = app
    return f"app:{key}"


def check_agents(refs: list[str] | None) -> None:
    """Every agent among ``refs`` loads (``ValueError`` naming the first that does not); models are left to the
    preflight."""
    for ref in refs or []:
        if is_agent_ref(ref):
            load_agent(ref)


@functools.cache
def load_agent(ref: str) -> AgentApp:
    """The agent ``ref`` names, loaded once per process (its graph compiled with an in-memory checkpointer when
    it has none); ``ValueError`` naming what is wrong."""
    parsed = parse_agent_ref(ref)
    if parsed.kind == "app":
        if parsed.target not in _registered:
            raise ValueError(
                f"agent {ref!r} is not registered in this process (an app handed to the Python API is valid only "
                "in the process that ran evaluate(); name a graph:MODULE:ATTR instead)"
            )
        return as_app(parsed, _registered[parsed.target])
    if parsed.kind == "langgraph":
        from dyneval.runtime.agents.remote import open_remote

        return open_remote(parsed)
    return as_app(parsed, _attribute(parsed))


def _attribute(parsed: AgentRef) -> Any:
    return attribute(parsed.target, parsed.attr, f"agent {parsed.ref!r}")


def attribute(target: str, attr: str, named: str) -> Any:
    """``attr`` of the module ``target`` (``MODULE`` or ``path/to/file.py``, as ``langgraph.json`` names them);
    ``ValueError`` starting with ``named`` when it cannot be imported or has no such attribute."""
    module = _module(target, named)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"{named}: {target} has no attribute {attr!r}") from None


def _module(target: str, named: str) -> Any:
    if target.endswith(".py") or "/" in target:
        path = Path(local_path(target)).resolve()
        if not path.is_file():
            where = (
                f" on {socket.gethostname()}, in the Ray driver's working folder (on a cluster of other machines, "
                "name a module or a path present on each)"
                if files_from()
                else ""
            )
            raise ValueError(f"{named}: no file {target}: looked for {path}{where}")
        name = f"dyneval_agent_{abs(hash(str(path)))}"
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ValueError(f"{named}: {target} cannot be imported as Python")
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(path.parent))  # the app's own sibling modules, as langgraph dev imports them
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # noqa: BLE001 - the user's module failed to import: one line, exit 2
            raise ValueError(f"{named}: importing {target} failed: {type(exc).__name__}: {exc}") from None
        sys.modules[name] = module
        return module
    _working_folder_importable()
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        raise ValueError(f"{named}: no module named {exc.name!r}") from None
    except Exception as exc:  # noqa: BLE001 - as above
        raise ValueError(f"{named}: importing {target} failed: {type(exc).__name__}: {exc}") from None


def _working_folder_importable() -> None:
    """Let ``MODULE`` name a module of the working folder (the driver's, on a Ray worker), as ``langgraph dev`` and
    ``python -m`` do: the ``dyneval`` console script, unlike them, does not put it on ``sys.path``. It is appended,
    not inserted: a folder of the project named like an installed package or a standard module (``json/``,
    ``langgraph/``) must not replace it for this process, dyneval's own imports included, so only a module found
    nowhere else is imported from there."""
    folder = str((files_from() or Path.cwd()).resolve())
    with _lock:
        if folder not in sys.path:
            sys.path.append(folder)


def as_app(parsed: AgentRef, obj: Any) -> AgentApp:
    """``obj`` as an :class:`AgentApp`: a compiled graph, a builder (compiled here), a factory (called with no
    argument, returning either) or a ``(message, *, thread_id)`` app."""
    from langgraph.graph import StateGraph
    from langgraph.pregel import Pregel

    if isinstance(obj, StateGraph):
        obj = obj.compile()
    if isinstance(obj, Pregel):
        return GraphApp(parsed, obj)
    if not callable(obj):
        raise ValueError(
            f"agent {parsed.ref!r} is a {type(obj).__name__}: not a compiled graph, a StateGraph builder, a factory "
            "or an app(message, *, thread_id)"
        )
    parameters = inspect.signature(obj).parameters
    if "thread_id" in parameters:
        return CallableApp(parsed, obj)
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.default is p.empty and p.kind in positional for p in parameters.values()):
        raise ValueError(
            f"agent {parsed.ref!r}: a callable taking arguments must be app(message, *, thread_id); "
            "a factory takes none"
        )
    try:
        made = obj()
    except Exception as exc:  # noqa: BLE001 - the user's factory failed: one line, exit 2
        raise ValueError(f"agent {parsed.ref!r}: its factory raised {type(exc).__name__}: {exc}") from None
    if isinstance(made, StateGraph):
        made = made.compile()
    if not isinstance(made, Pregel):
        raise ValueError(f"agent {parsed.ref!r}: its factory returned a {type(made).__name__}, not a graph")
    return GraphApp(parsed, made)
