"""What a battery, a hunt, a gate or a proof checks (:class:`Subject`, built by :func:`subject`): a built-in verifier,
a ``module:function`` plugin or a torch kernel through its adapter, with the shapes it is defined on and the
drafting schemes it claims (docs/plugins.md, "Declaring the drafting schemes")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from simulator.drafting.drafter_registry import DRAFTERS
from simulator.errors import InvalidParameterError
from simulator.trees import make_topology, node_depths
from simulator.usercode import require
from simulator.verifiers.registry import ALL_SHAPES, VERIFIERS, Verifier, knob_values, load_verifier, verifier_name

KERNEL_KEYS = ("kernel", "adapter", "dtype", "uniforms", "kernel_kwargs", "kernel_init", "import_path")


@dataclass(frozen=True)
class Subject:
    """A verifier or kernel with its name, where it is defined and what it claims.

    Its description is a small JSON object, the same in a gate config, a reproducer and a certificate:
    ``{"verifier": "tv-sps"}``, ``{"verifier": "typical", "verifier_kwargs": {"posterior_alpha": 0.5}}``,
    ``{"verifier": "mypkg.spec:verify"}`` or ``{"kernel": "mypkg.k:verify", "adapter":
    "chain", ...}`` (:data:`KERNEL_KEYS`). ``"shapes"`` and ``"schemes"`` (a gate config's, or ``--schemes``) override
    the defaults: the claimed schemes are resolved here, one way for every command.
    """

    name: str
    fn: Verifier = field(compare=False)
    description: dict  # the JSON object that rebuilds it (module docstring)
    shapes: tuple[str, ...] = ALL_SHAPES
    schemes: tuple[str, ...] = ("iid",)  # where it claims losslessness (a control: where its bug shows)
    float_only: bool = False
    claims: bool = True  # a control claims nothing: its schemes are where its bug shows
    lossy_by_design: bool = False  # a rule that gives up losslessness for acceptance (docs/lossy.md): no claim

    def allows(self, parents: Sequence[int]) -> bool:
        """Whether the subject is defined on a tree of this parent list."""
        return bool(set(self.shapes) & shape_names(parents))

    def control_run(self, scheme: str) -> bool:
        """Whether a run under drafting ``scheme`` is a control run: the subject claims losslessness, but not
        under ``scheme``, so the verdict there is no claim of its."""
        return self.claims and scheme not in self.schemes

    @property
    def kind(self) -> str:
        """``lossless`` (a rule claiming losslessness), ``control`` (a negative control) or ``lossy by design``."""
        return "lossy by design" if self.lossy_by_design else "lossless" if self.claims else "control"

    def default_scheme(self) -> str:
        """The drafting scheme a command runs when none is given: ``iid`` where claimed, else the first claimed."""
        return "iid" if "iid" in self.schemes else self.schemes[0]

    def require_claimed(self, scheme: str, field_name: str = "drafting") -> None:
        """Refuse ``scheme`` unless the subject claims it (``prove``, the gate): a typed error naming the option."""
        if scheme not in self.schemes:
            raise InvalidParameterError(field_name, f"{self.name} claims losslessness under {list(self.schemes)}, "
                                                    f"not {scheme!r}: pass one of those, or declare the scheme "
                                                    "(--schemes, a gate check's schemes, or the function's "
                                                    "schemes attribute; docs/plugins.md)")

    def claim_json(self, scheme: str) -> dict:
        """What a certificate's JSON says of the claim: the schemes claimed and whether this is a control run."""
        return {"claimed_schemes": list(self.schemes), "control_run": self.control_run(scheme)}

    def control_note(self, scheme: str) -> str | None:
        """The line a command prints for a control run, or ``None``."""
        if not self.control_run(scheme):
            return None
        return (f"  control run: {self.name} claims losslessness under {', '.join(self.schemes)}, not {scheme}; "
                "this verdict is not a claim of the rule")


    def lossless_under(self, scheme: str) -> bool:
        """Whether a run under drafting ``scheme`` is a lossless rule's by the claim: the subject claims
        losslessness there (a negative control claims it nowhere)."""
        return self.claims and scheme in self.schemes

    def measurement_note(self, scheme: str) -> str | None:
        """What a measurement (``specproof real``, ``real-report``: no verdict of its own) says of a run under
        ``scheme`` that is not a lossless rule's, or ``None``: its speed and acceptance must not pass for one."""
        if self.lossless_under(scheme):
            return None
        why = (f"{self.name} is lossy by design (docs/lossy.md)" if self.lossy_by_design else
               f"{self.name} is a negative control, lossy by design" if not self.claims else
               f"{self.name} claims losslessness under {', '.join(self.schemes)}, not {scheme}")
        return (f"NOT LOSSLESS: {why}; the answers need not follow the target's distribution, and this run's speed "
                "and acceptance are not a lossless rule's")

    def measurement_json(self, scheme: str) -> dict:
        """What a measurement's JSON says of the claim (:meth:`measurement_note`)."""
        return {"lossless_claimed": self.lossless_under(scheme),
                "claimed_schemes": list(self.schemes) if self.claims else [],
                "negative_control": not self.claims and not self.lossy_by_design,
                "lossy_by_design": self.lossy_by_design,
                "note": self.measurement_note(scheme)}


def parse_schemes(text: str | None, field_name: str = "schemes") -> tuple[str, ...] | None:
    """``--schemes iid,without-replacement`` as a tuple of drafting schemes (``None`` when not given)."""
    if text is None:
        return None
    return check_schemes([part.strip() for part in text.split(",")], field_name)


def check_schemes(schemes: object, field_name: str) -> tuple[str, ...]:
    """``schemes`` as a tuple, refusing anything but a non-empty list of drafting scheme names (``specproof
    list``) with a typed error naming ``field_name``."""
    if isinstance(schemes, str) or not isinstance(schemes, (list, tuple)) or \
            not all(isinstance(s, str) for s in schemes):
        raise InvalidParameterError(field_name, f"must be a list of drafting scheme names, got {schemes!r}")
    unknown = [s for s in schemes if s not in DRAFTERS]
    if not schemes or unknown:
        raise InvalidParameterError(field_name, f"unknown drafting scheme {unknown[0] if unknown else ''!r}: "
                                                f"choose from {', '.join(DRAFTERS)}")
    return tuple(dict.fromkeys(schemes))


def declared_schemes(fn: object, name: str) -> tuple[str, ...] | None:
    """The schemes a plugin's function declares (``my_rule.schemes = ("iid", "without-replacement")``), or
    ``None``."""
    declared = getattr(fn, "schemes", None)
    return None if declared is None else check_schemes(declared, f"{name}.schemes")


def subject(what: object, field_name: str = "verifier", schemes: Sequence[str] | None = None) -> Subject:
    """What a battery, a hunt, a gate or a proof checks, built from any of the ways a caller names it.

    Defaults: a built-in's registry entry; a plugin, every shape under the schemes its function declares
    (``my_rule.schemes = ("without-replacement",)``), else ``iid``; a chain adapter, chains.

    Parameters
    ----------
    what : object
        A registry name (``"tv-sps"``), ``"module:function"``, a description object (``{"verifier": ...}`` or
        ``{"kernel": ..., "adapter": ...}``, with optional ``"shapes"`` and ``"schemes"``), a verifier function, a
        :class:`simulator.kernels.kernel.Kernel`, or a :class:`Subject` (returned as it is).
    field_name : str
        The field errors are named after.
    schemes : sequence of str, optional
        The drafting schemes it is checked under, overriding what it claims (``--schemes``).

    Returns
    -------
    Subject
        Its name, the callable verifier, its description, the shapes it is defined on and the schemes it claims.

    Raises
    ------
    InvalidParameterError
        An unknown name, key, shape or scheme, a module or function that cannot be imported, or a value of another
        type, naming ``field_name``.
    MissingDependencyError
        A kernel described while torch is not installed (the message names the extra).
    """
    if isinstance(what, Subject):
        return what
    if isinstance(what, dict):
        return _from_description(what, field_name, schemes)
    if isinstance(what, str):
        return _from_description({"verifier": what}, field_name, schemes)
    if hasattr(what, "describe") and hasattr(what, "adapter"):  # a Kernel
        desc = what.describe()
        return _kernel_subject(what, desc, schemes)
    if callable(what):
        name = verifier_name(what)  # type: ignore[arg-type]
        spec = VERIFIERS.get(name)
        if spec is not None:
            return _from_description({"verifier": name, "verifier_kwargs": knob_values(what)}, field_name, schemes)
        claimed = schemes or declared_schemes(what, name) or ("iid",)
        return Subject(name, what, {"verifier": name}, schemes=tuple(claimed))  # type: ignore[arg-type]
    raise InvalidParameterError(field_name, f"expected a verifier name, module:function, a verifier function or a "
                                            f"Kernel, got {type(what).__name__}")


def _from_description(desc: dict, field_name: str, schemes: Sequence[str] | None) -> Subject:
    unknown = set(desc) - {"verifier", "verifier_kwargs", *KERNEL_KEYS, "schemes", "shapes"}
    if unknown:
        raise InvalidParameterError(f"{field_name}.{sorted(unknown)[0]}", "unknown key (expected verifier, or kernel "
                                                                          f"with {', '.join(KERNEL_KEYS[1:])})")
    if ("verifier" in desc) == ("kernel" in desc):
        raise InvalidParameterError(field_name, "give exactly one of verifier or kernel")
    if "schemes" in desc:
        schemes = check_schemes(desc["schemes"], f"{field_name}.schemes")
    elif schemes is not None:
        schemes = check_schemes(schemes, "schemes")
    shapes = _strings(desc["shapes"], f"{field_name}.shapes") if "shapes" in desc else None
    if shapes is not None and not set(shapes) <= set(ALL_SHAPES):
        raise InvalidParameterError(f"{field_name}.shapes", f"must be drawn from {ALL_SHAPES}, got {list(shapes)}")
    if "verifier" in desc:
        if not isinstance(desc["verifier"], str):
            raise InvalidParameterError(f"{field_name}.verifier", "must be a name or module:function")
        extra = set(desc) & set(KERNEL_KEYS[1:])
        if extra:
            raise InvalidParameterError(f"{field_name}.{sorted(extra)[0]}", "applies to a kernel only")
        knobs = desc.get("verifier_kwargs") or {}
        if not isinstance(knobs, dict):
            raise InvalidParameterError(f"{field_name}.verifier_kwargs", "must be a table of NAME = VALUE")
        name, fn = load_verifier(desc["verifier"], knobs)
        if not knobs:
            desc = {k: v for k, v in desc.items() if k != "verifier_kwargs"}
        spec = VERIFIERS.get(name)
        if spec is None:
            claimed = schemes or declared_schemes(fn, name) or ("iid",)
            return Subject(name, fn, desc, shapes or ALL_SHAPES, tuple(claimed))
        claimed = spec.lossless_under or ((spec.demo[1],) if spec.demo else ("iid",))
        return Subject(name, fn, desc, shapes or spec.shapes, tuple(schemes or claimed), spec.float_only,
                       claims=bool(spec.lossless_under), lossy_by_design=spec.lossy_by_design)
    require("torch", f"the kernel {desc['kernel']!r}", field_name)
    from simulator.kernels.kernel import Kernel  # torch only when a kernel is checked

    tables = {key: desc.get(key, {}) for key in ("kernel_kwargs", "kernel_init")}
    for key, table in tables.items():
        if not isinstance(table, dict):
            raise InvalidParameterError(f"{field_name}.{key}", "must be a table of NAME = VALUE")
    import_path = _strings(desc["import_path"], f"{field_name}.import_path") if "import_path" in desc else ()
    for key in ("kernel", "adapter", "dtype", "uniforms"):
        if key in desc and not isinstance(desc[key], str):
            raise InvalidParameterError(f"{field_name}.{key}", "must be a string")
    kernel = Kernel(desc["kernel"], desc.get("adapter", "tree"), desc.get("dtype", "float64"),
                    desc.get("uniforms", "continuous"), dict(tables["kernel_kwargs"]),
                    init=dict(tables["kernel_init"]), import_path=import_path)
    return _kernel_subject(kernel, {**kernel.describe(), **{k: desc[k] for k in ("schemes", "shapes") if k in desc}},
                           schemes, shapes)


def _kernel_subject(kernel, desc: dict, schemes: Sequence[str] | None, shapes: Sequence[str] | None = None) -> Subject:
    from simulator.kernels.kernel import CHAIN_ADAPTERS

    shapes = shapes or (("chain",) if desc["adapter"] in CHAIN_ADAPTERS else ALL_SHAPES)
    return Subject(desc["kernel"], kernel, desc, tuple(shapes), tuple(schemes or ("iid",)))


def _strings(value: object, field_name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidParameterError(field_name, "must be a list of strings")
    return tuple(value)


def shape_names(parents: Sequence[int]) -> set[str]:
    """Every topology name a parent list qualifies as (``explicit`` always; ``chain``, ``multi-chain`` with
    equal-depth chains, and the named shapes it equals)."""
    parents = tuple(parents)
    names = {"explicit"}
    kids = [0] * len(parents)
    for par in parents[1:]:
        kids[par] += 1
    width = kids[0] if parents else 0
    depth = max(node_depths(parents))
    if all(k <= 1 for k in kids):
        names.add("chain")
    if all(k <= 1 for k in kids[1:]) and width >= 1 and parents == make_topology("multi-chain", depth, width).parents:
        names.add("multi-chain")
    for name in ("complete", "tapered", "binary"):
        if width >= 1 and parents == make_topology(name, depth, width).parents:
            names.add(name)
    return names

