"""Checks of where a command will run, made before any work: a torch device, a Dask scheduler's address."""

from __future__ import annotations

from simulator.errors import InvalidParameterError
from simulator.usercode import require


def check_device(device: str | None, field: str = "device") -> None:
    """Refuse, before any work, a torch ``--device`` this machine cannot use (a misspelt one, ``cuda`` without
    CUDA) or any device without torch, naming the extra that installs it (``None``: numpy, no torch)."""
    if device is not None:
        require("torch", f"--{field} {device}", field)
        from simulator.devices import usable_device  # imports torch

        usable_device(device, field)


def check_scheduler(address: str | None) -> None:
    """Refuse, before any work, a ``--scheduler`` that is neither ``local`` nor a Dask address with a port
    (``tcp://host:8786``, ``host:8786``): Dask's own check comes only when it connects, after the certification
    table."""
    if address is None or address == "local":
        return
    require("distributed", "--scheduler", "scheduler")
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, location = parse_address(address)
        if scheme in ("tcp", "tls", "ws", "wss"):
            parse_host_port(location)
    except ValueError as err:
        raise InvalidParameterError("scheduler", f"'local' or a Dask scheduler's address such as tcp://host:8786, "
                                                 f"got {address!r} ({err})") from None
