"""Load a user's claims file (`--claims FILE`) and reject a malformed one with `FILE:LINE: message`.

A malformed file is not a false claim: the command line exits 2 for it, 1 for a claim that fails.
Caught here, before any stage runs: a syntax error, a claim id registered twice or colliding with
a built-in one, an identity whose functions cannot be called with the model and its free indices
(`binding_error`), and a claim that names an unknown quantity, leaf or dimension (found by building
each side once, symbolically).
"""
from __future__ import annotations

import importlib.util
import inspect
import traceback
from pathlib import Path

import sympy as sp

from derive import claims as registry
from derive import mechanisms
from derive.model import ShapeError


class ClaimFileError(Exception):
    """A claims file that cannot be run, with the file and line to fix."""


# Which file registered each mechanism loaded so far (for the message when another file takes the name).
LOADED_FROM: dict = {}


def load(path, mechanism_checks=()) -> list:
    """Execute a claims file (it calls `derive.claims.register` and may register mechanisms), check what it
    added, return the new claim ids. mechanism_checks: further checks of each mechanism it registers, each
    raising derive.mechanisms.check.MechanismError (the command line's: its torch reference, numeric.reference_check)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"extra claims file not found: {path}")
    mechanisms.builtin()  # loaded first, so a file cannot take a built-in's name (nor replace it unseen)
    builtin = set(registry.builtin_ids())
    before = set(registry.REGISTRY)
    before_mechanisms = set(mechanisms.REGISTRY)
    try:
        _execute(path)
    except SyntaxError as exc:
        raise ClaimFileError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from exc
    except Exception as exc:
        _drop(before, before_mechanisms)
        raise ClaimFileError(f"{path}:{_line_in(path, exc)}: {_message(exc, builtin)}") from exc
    added = [cid for cid in registry.REGISTRY if cid not in before]
    new_mechanisms = [n for n in mechanisms.REGISTRY if n not in before_mechanisms]
    try:
        for name in new_mechanisms:
            _check_mechanism(mechanisms.REGISTRY[name], path, mechanism_checks)
        for cid in added:
            check(registry.REGISTRY[cid], path)
    except BaseException:
        _drop(before, before_mechanisms)  # nothing half-checked stays registered
        raise
    LOADED_FROM.update(dict.fromkeys(new_mechanisms, str(path)))
    return added


def _check_mechanism(mechanism, path, further=()):
    """A mechanism the file registered: every question builds and its weight reads only logits and mask
    (and whatever `further` checks)."""
    from derive.mechanisms.check import MechanismError
    from derive.mechanisms.check import check as check_mechanism

    try:
        check_mechanism(mechanism)
        for extra in further:
            extra(mechanism)
    except MechanismError as exc:
        code = getattr(exc.function, "__code__", None)
        own = code.co_firstlineno if code and Path(code.co_filename).resolve() == path.resolve() else None
        # the line in the file where it failed (the deepest frame there), else the function's own definition
        line = _line_in(path, exc.__cause__, own) if exc.__cause__ is not None else (own or 1)
        raise ClaimFileError(f"{path}:{line}: {exc}") from exc


def _execute(path):
    spec = importlib.util.spec_from_file_location(f"extra_claims_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def _drop(before, before_mechanisms=None):
    for cid in set(registry.REGISTRY) - before:
        del registry.REGISTRY[cid]
    for name in set(mechanisms.REGISTRY) - (before_mechanisms if before_mechanisms is not None else set(mechanisms.REGISTRY)):
        del mechanisms.REGISTRY[name]


def _message(exc, builtin):
    text = str(exc)
    if isinstance(exc, ValueError) and text.startswith("mechanism "):  # derive.mechanisms' own refusals
        name = text.split()[1].rstrip(":")
        if name in LOADED_FROM and "registered already" in text:
            return f"mechanism {name}: the name is taken by {LOADED_FROM[name]}; choose another"
        return text
    for cid in builtin:
        if text == f"claim {cid} is already registered":
            return f"claim id {cid} is a built-in claim of this project; choose another id"
    if isinstance(exc, ValueError) and "already registered" in text:
        return f"{text} (ids must be unique)"
    return f"{type(exc).__name__}: {text}"


def _line_in(path, exc, fallback=None):
    """The line of `path` where `exc` was raised (the deepest frame in that file)."""
    target = str(path.resolve())
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if str(Path(f.filename).resolve()) == target]
    return lines[-1] if lines else (fallback or 1)


def check(claim, path):
    """Build every identity and mutant of `claim` once at general size; structural errors name their line."""
    for identity in claim.parts:
        _check_sides(claim, identity, identity.derived, identity.closed, path, f"identity {identity.name!r}")
    for mutant in claim.mutants:
        if mutant.constant is None:
            identity = claim.part(mutant.part)
            _check_sides(claim, identity, mutant.derived or identity.derived, mutant.closed or identity.closed, path,
                         f"mutant {mutant.id} of identity {identity.name!r}")


def _check_sides(claim, identity, derived, closed, path, what):
    from derive.general import GeneralBackend

    for side, fn in (("derived", derived), ("closed", closed)):
        line = fn.__code__.co_firstlineno if hasattr(fn, "__code__") else 1
        where = f"claim {claim.id}, {what}, {side} side"
        _check_arity(identity, fn, path, line, where)
        m = GeneralBackend(identity.setting("ce", True), f"{claim.id} / {identity.name}")
        try:
            ix = m.free_indices(identity.free)
            value = fn(m, *ix)
            m.check_free(value, ix, f"the {side} side")
        except (ShapeError, AttributeError, NameError, KeyError, TypeError) as exc:
            raise ClaimFileError(f"{path}:{_line_in(path, exc, line)}: {where}: {_structural(exc, m)}") from exc
        except Exception:  # not structural: a proof path reports it as undecided, with the reason
            continue
        floats = sorted(sp.sympify(value).atoms(sp.Float), key=float) if _is_expr(value) else []
        if floats:
            raise ClaimFileError(f"{path}:{line}: {where}: the float {floats[0]} is not exact; write it as "
                                 f"fractions.Fraction or an integer ratio (the proofs are exact)")


def _is_expr(value):
    try:
        sp.sympify(value)
        return True
    except (sp.SympifyError, TypeError):
        return False


def _check_arity(identity, fn, path, line, where):
    reason = binding_error(fn, len(identity.free))
    if reason:
        raise ClaimFileError(f"{path}:{line}: {where}{_signature(fn)} "
                             f"cannot be called with the model and one index per free range {identity.free} "
                             f"({1 + len(identity.free)} positional arguments): {reason}")


def binding_error(fn, n_indices):
    """Why `fn(m, *ix)` with `n_indices` free indices cannot be called, or None when it can.

    The one arity check of a claim's `derived`, `closed` and mutant functions: the call is bound
    (`inspect.signature(fn).bind`) with placeholders for the model and the indices, so optional
    parameters, `*args` and keyword-only parameters with defaults are accepted, as Python would.
    A callable whose signature cannot be inspected (some builtins) is not refused here: the trial
    call in `_check_sides` runs it, and a TypeError from that call is reported with its line.
    """
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # no signature to bind (some builtins): left to the trial call
        return None
    try:
        signature.bind(*(object() for _ in range(1 + n_indices)))
    except TypeError as exc:
        required = [p.name for p in signature.parameters.values() if p.kind == p.KEYWORD_ONLY and p.default is p.empty]
        if any(repr(name) in str(exc) for name in required):
            return f"{exc} (keyword-only without a default; the model and the indices are passed by position)"
        return str(exc)
    return None


def _signature(fn):
    try:
        return f" {inspect.signature(fn)}"
    except (TypeError, ValueError):
        return ""


def _structural(exc, model):
    if isinstance(exc, AttributeError) and getattr(exc, "obj", None) is model:
        return f"unknown quantity m.{exc.name} (see 'Writing your own claims' in the README)"
    return f"{type(exc).__name__}: {exc}"
