"""llama-cpp-python's OpenAI-compatible server, on the socket the core passed.

Target ``naga_plugins.localmodel.llama:main`` (see the package docstring for
the argument list); the rest of the arguments are ``python -m
llama_cpp.server``'s own (``--model``, ``--model_alias``, ``--n_ctx``, ...).
It does what that module's ``main`` does, except that uvicorn serves the
inherited socket instead of binding one.

Everything is imported here, at module level: the sandbox imports the target
before it loads the seccomp filter, after which no shared library can be
mapped executable (llama.cpp's, numpy's, the interpreter's own extension
modules). uvicorn's implementations are named, not ``auto``: ``auto``
picks them by trying imports while it runs.
"""

from __future__ import annotations

import argparse
import importlib
import socket
from typing import Any, TypeVar

import uvicorn
from llama_cpp.server.app import create_app
from llama_cpp.server.cli import add_args_from_model
from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings
from pydantic import BaseModel

from naga_plugins.localmodel import serve
from naga_plugins.localmodel.errors import BadServerArguments

#: What uvicorn would import once running: the loop, HTTP and lifespan
#: implementations named below.
_RUNTIME_MODULES = (
    "asyncio",
    "uvicorn.lifespan.on",
    "uvicorn.loops.asyncio",
    "uvicorn.protocols.http.h11_impl",
)
for _name in _RUNTIME_MODULES:
    importlib.import_module(_name)


M = TypeVar("M", bound=BaseModel)


def _settings(model: type[M], parsed: argparse.Namespace) -> M:
    given: dict[str, Any] = {
        k: v for k, v in vars(parsed).items() if v is not None and k in model.model_fields
    }
    return model.model_validate(given)


def _serve_llama(listener: socket.socket, args: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="naga-local-model", exit_on_error=False)
    add_args_from_model(parser, Settings)
    try:
        parsed = parser.parse_args(args)
        server_settings = _settings(ServerSettings, parsed)
        model_settings = _settings(ModelSettings, parsed)
    except (argparse.ArgumentError, ValueError) as e:
        raise BadServerArguments(f"bad llama_cpp.server arguments: {e}") from e
    app = create_app(server_settings=server_settings, model_settings=[model_settings])
    config = uvicorn.Config(
        app, loop="asyncio", http="h11", ws="none", lifespan="on", log_level="info"
    )
    print(f"naga local model serving on {listener.getsockname()}", flush=True)
    uvicorn.Server(config).run(sockets=[listener])
    return 0


def main(args: list[str]) -> int:
    """The sandbox target."""
    return serve(args, _serve_llama)


__all__ = ["main"]
