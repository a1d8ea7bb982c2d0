"""File -> Model in one pass down: read (GGUF or HF directory), map names through a layout, derive the
hyperparameters from the shapes, check every role's presence, shape and dtype, so that the graph builders can
trust what they get. Nothing is converted here except codebooks that come with usage counts (divided once, as
upstream does at every decode).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from kzlab.arch import Arch, families, family_names, get_arch
from kzlab.errors import InvalidModelError, InvalidOptionError, LayoutError
from kzlab.formats import reader
from kzlab.formats.layout import LayoutMap, builtin_layouts, get_layout
from kzlab.model.checks import count_nonfinite
from kzlab.model.model import QK8_0, Model, Role, Weight, to_f32


def detect_layout(raw: reader.RawFile) -> LayoutMap | None:
    """The built-in dialect that fits this file (architecture and tensor names), if any."""
    names = list(raw.tensors)
    best: tuple[int, LayoutMap] | None = None
    for lm in builtin_layouts():
        if not lm.matches(raw.architecture, names):
            continue
        mapped = sum(1 for n in names if lm.role_of(n) is not None)
        if best is None or mapped > best[0]:
            best = (mapped, lm)
    return best[1] if best else None


def layout_by_names(raw: reader.RawFile) -> LayoutMap | None:
    """A built-in dialect whose map names every tensor of this file (none left over, none twice) although
    the file's `general.architecture` is not one the dialect accepts: a file relabelled, or written
    without the label. `detect_layout` refuses such a file on its label; its names say what it is."""
    names = list(raw.tensors)
    best: tuple[int, LayoutMap] | None = None
    for lm in builtin_layouts():
        if not lm.architectures or raw.architecture in lm.architectures:
            continue  # detect_layout has judged this one on the names already
        if not all(any(rx.search(n) for n in names) for rx in lm.detect):
            continue
        try:
            mapping, unmapped = lm.apply(names)
        except LayoutError:
            continue
        if unmapped or not mapping:
            continue
        if best is None or len(mapping) > best[0]:
            best = (len(mapping), lm)
    return best[1] if best else None


def _architecture_says(arch: str | None, lm: LayoutMap | None = None) -> str:
    """What is wrong with a file's `general.architecture` label, for a warning or an error."""
    known = sorted({a for m in builtin_layouts() for a in m.architectures})
    if arch is None:
        what = "the file has no general.architecture"
    elif arch not in known:
        what = (
            f"general.architecture {arch!r} is not a codec decoder architecture "
            f"(the built-in layouts accept {', '.join(map(repr, known))})"
        )
    else:
        what = f"general.architecture {arch!r} is not one layout '{lm.name if lm else '?'}' accepts"
        if lm is not None:
            what += f" ({', '.join(map(repr, lm.architectures))})"
    return what


def _normalise(role: str, kind: str | None, t: reader.RawTensor) -> tuple[int, ...]:
    """Drop the size-1 kernel axis some converters keep on 1x1 projections."""
    shape = t.shape
    if kind == "linear" and len(shape) == 3 and shape[2] == 1:
        return shape[:2]
    if kind == "linear" and len(shape) == 3 and shape[0] == 1:
        return shape[1:]
    return shape


def _kind_hint(family: str) -> tuple[str, ...]:
    """Role-name endings of a family's 1x1 projections that converters store with a size-1 kernel axis (its
    files half's `LINEAR_ROLE_ENDINGS`): their shapes are read as matrices before the sizes are derived."""
    from kzlab.formats.family_files import files_half

    return tuple(getattr(files_half(family), "LINEAR_ROLE_ENDINGS", ()))


def load_model(
    path: str | Path,
    layout: str | Path | LayoutMap | None = None,
    check_finite: bool = True,
    infer: bool = True,
    overrides: dict[str, Any] | None = None,
    hparams: dict[str, Any] | None = None,
) -> Model:
    """Read a decoder file and map it to canonical roles.

    `layout` names a built-in dialect or a TOML map; without it the dialect is detected, and files no
    dialect fits go through structural inference (`kzlab.formats.infer`) when `infer` is true. A file whose
    names are exactly a built-in map's but whose `general.architecture` that map does not accept (relabelled,
    or unlabelled) is loaded through the map, with a warning and a note that say so (refused when `infer`
    is false, since then only a file's label and names together choose its dialect).
    `hparams` gives hyperparameters that neither shapes nor metadata tell (e.g. `{"num_heads": 4}`,
    `{"group_norm_groups": 16}`); they win over the map's `[hparams]` table. Each family accepts its own
    (`kzlab.formats.given`); what is given is recorded as given in `Model.hparams_given` and the notes.
    `overrides` is its older name (give one of the two). A built-in name (`tiny`, `wavtokenizer-tiny`, `synthetic`...,
    see kzlab.formats.named) works wherever a file does, unless a file of that name exists.
    """
    from kzlab.formats.named import resolve_name

    if hparams is not None and overrides is not None:
        raise InvalidOptionError("load_model: give hparams= (or its older name overrides=), not both")
    overrides = hparams if hparams is not None else overrides
    raw = reader.read(resolve_name(path))
    notes: list[str] = []
    if layout is not None:
        lm = get_layout(layout)
    else:
        lm = detect_layout(raw)
        by_names = layout_by_names(raw) if lm is None else None
        if lm is None and by_names is not None:
            # the names are exactly a built-in map's: only the label is wrong (or missing)
            said = (
                f"{_architecture_says(raw.architecture, by_names)}, but the tensor names are exactly those of "
                f"the built-in layout '{by_names.name}'"
            )
            if not infer:
                raise LayoutError(
                    f"{raw.path}: no known layout fits this file: {said}; give layout='{by_names.name}' to "
                    "load it through that map"
                )
            lm = by_names
            notes.append(f"{said}: loaded through that layout")
            warnings.warn(f"{raw.path}: {said}: loaded through that layout", stacklevel=2)
        elif lm is None:
            if not infer:
                raise LayoutError(
                    f"{raw.path}: no known layout fits this file (architecture {raw.architecture!r}); "
                    "give one with layout=... or run `kzlab layout infer`"
                )
            from kzlab.arch import known_architectures, unknown_family_error
            from kzlab.errors import KzlabError
            from kzlab.formats.infer import infer_layout

            try:
                proposal = infer_layout(raw)
            except KzlabError as e:
                if raw.architecture is not None and raw.architecture not in known_architectures():
                    # a GGUF of another kind (a language model...): say so first, then why inference failed
                    raise type(e)(f"{unknown_family_error(raw.path, raw.architecture)} ({e})") from None
                raise
            lm = proposal.layout
            label = ""
            known = {a for m in builtin_layouts() for a in m.architectures}
            if raw.architecture is not None and raw.architecture not in known:
                label = f" (and {_architecture_says(raw.architecture)})"
            notes.append(f"layout inferred from structure{label}: {proposal.summary()}")
            warnings.warn(f"{raw.path}: unknown tensor names{label}; {proposal.summary()}", stacklevel=2)
    if lm.names_from or lm.prefix or lm.config_from:
        raw = _unpacked(raw, lm, notes)
    mapping, unmapped = lm.apply(raw.tensors)
    if unmapped:
        shown = ", ".join(unmapped[:5]) + (" ..." if len(unmapped) > 5 else "")
        notes.append(f"{len(unmapped)} tensors not used by the decoder: {shown}")
    values = {**lm.hparams, **(overrides or {})}
    if lm.transforms:
        raw, mapping = _transformed(raw, lm, mapping, values, layout_family(lm), notes)
    if not lm.read_metadata:
        notes.append(f"the file's metadata describes its other parts; the decoder's hyperparameters are not read "
                     f"from it (layout {lm.name})")
    return model_from_mapping(
        raw, lm.name, mapping, notes, check_finite, overrides=values, quirks=lm.quirks, family=layout_family(lm),
        read_metadata=lm.read_metadata, map_given=frozenset(set(lm.hparams) - set(overrides or {})),
    )


def _unpacked(raw: reader.RawFile, lm: LayoutMap, notes: list[str]) -> reader.RawFile:
    """A packed file as the map's rules read it (kzlab.formats.layout: `names_from`/`mangled`, `prefix`,
    `config_from`/`config_file`): stored names that are indices replaced by the names array's entries, only
    the tensors under the prefix kept (the prefix dropped), the embedded config.json as metadata."""
    import dataclasses

    src = str(raw.path)
    tensors = dict(raw.tensors)
    if lm.names_from:
        names = raw.metadata.get(lm.names_from)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise InvalidModelError(f"{src}: no string array {lm.names_from!r} to read the tensor names from")
        if len(names) < len(tensors):
            raise InvalidModelError(
                f"{src}: {lm.names_from} names {len(names)} tensors but the file holds {len(tensors)}"
            )
        renamed: dict[str, reader.RawTensor] = {}
        for stored, t in tensors.items():
            m = lm.mangled.fullmatch(stored) if lm.mangled is not None else None
            name = stored
            if m is not None:
                i = int(m.group(1))
                if i >= len(names):
                    raise InvalidModelError(f"{src}: tensor '{stored}' points past the {len(names)} names")
                name = names[i]
            if name in renamed:
                raise InvalidModelError(f"{src}: two tensors are named '{name}'")
            renamed[name] = dataclasses.replace(t, name=name)
        tensors = renamed
    if lm.prefix:
        inside = {n[len(lm.prefix):]: dataclasses.replace(t, name=n[len(lm.prefix):])
                  for n, t in tensors.items() if n.startswith(lm.prefix)}
        if len(inside) < len(tensors):
            notes.append(f"{len(tensors) - len(inside)} tensors outside {lm.prefix!r} left alone (another model "
                         "packed in the same file)")
        tensors = inside
    meta = dict(raw.metadata)
    if lm.config_from:
        cfg = _embedded_json(raw.metadata, lm.config_from, lm.config_file, src)
        meta.update(reader.config_metadata(cfg))
    return dataclasses.replace(raw, tensors=tensors, metadata=meta)


def _embedded_json(meta: dict[str, Any], key: str, name: str, src: str) -> dict[str, Any]:
    """The JSON file `name` among the files embedded as `key`.names / .offsets / .data (a byte array)."""
    import json

    names, offsets, data = (meta.get(f"{key}.{k}") for k in ("names", "offsets", "data"))
    if not isinstance(names, list) or not isinstance(offsets, list) or data is None:
        raise InvalidModelError(f"{src}: no embedded files under {key!r} (names, offsets, data)")
    if name not in names:
        raise InvalidModelError(f"{src}: {name!r} is not among the embedded files ({', '.join(map(str, names))})")
    i = names.index(name)
    if len(offsets) < len(names) + 1:
        raise InvalidModelError(f"{src}: {key}.offsets has {len(offsets)} entries for {len(names)} files")
    a, b = int(offsets[i]), int(offsets[i + 1])
    blob = bytes(np.asarray(data, dtype=np.uint8)) if not isinstance(data, bytes | bytearray) else bytes(data)
    if not 0 <= a <= b <= len(blob):
        raise InvalidModelError(f"{src}: embedded file {name!r} lies outside {key}.data")
    try:
        cfg = json.loads(blob[a:b].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise InvalidModelError(f"{src}: embedded {name!r} is not JSON: {e}") from None
    if not isinstance(cfg, dict):
        raise InvalidModelError(f"{src}: embedded {name!r} is not a JSON object")
    return cfg


def _transformed(
    raw: reader.RawFile, lm: LayoutMap, mapping: dict[str, str], values: dict[str, Any], family: str,
    notes: list[str],
) -> tuple[reader.RawFile, dict[str, str]]:
    """The map's value transforms applied (kzlab.formats.layout, `[transforms]`): each transformed tensor is
    replaced by a view of what the role reads, under a name that says where it came from."""
    import dataclasses

    from kzlab.formats.family_files import files_half

    accepted = getattr(files_half(family), "OVERRIDABLE", {})
    tensors = dict(raw.tensors)
    mapping = dict(mapping)
    #: note text (with {n}, {first}, {all} for the tensors it took) -> the tensors
    done: dict[str, list[str]] = {}
    src = str(raw.path)
    for role, name in sorted(mapping.items()):
        spec = lm.transform_of(name)
        if spec is None:
            continue
        kind, param = spec
        if kind == "split":
            del mapping[role]
            names = param.split(",") if param else None
            for k, part in enumerate(_split(src, tensors[name], role, names)):
                mapping[role.replace("{k}", names[k] if names else str(k))] = part.name
                tensors[part.name] = part
            done.setdefault("{n} stacked tensors taken apart along their first axis: {all}", []).append(
                f"{name} {list(tensors[name].shape)}"
            )
            continue
        if kind == "diagonal":
            tensors[name + "[diagonal]"] = _diagonal(src, tensors[name])
            mapping[role] = name + "[diagonal]"
            done.setdefault("{n} depthwise kernels stored dense read back from their diagonal: {all}", []).append(name)
            continue
        if kind in ("log", "log_recip"):
            tensors[name + f"[{kind}]"] = _unfolded(src, tensors[name], kind, param)
            mapping[role] = name + f"[{kind}]"
            done.setdefault(f"{{n}} tensors stored folded read back through {kind}, e.g. {{first}}", []).append(name)
            continue
        if param not in accepted:
            raise LayoutError(
                f"layout map {lm.name}: transform {kind}:{param} names a hyperparameter the {family} family does "
                f"not accept ({', '.join(accepted) or 'none'})"
            )
        t = tensors[name]
        if len(t.shape) != 2:
            raise LayoutError(
                f"{src}: transform {kind}:{param} takes a row of a 2-D table, but '{name}' has shape {list(t.shape)}"
            )
        row = values.get(param, 0)
        if isinstance(row, bool) or not isinstance(row, int):
            raise InvalidOptionError(f"{src}: hyperparameter {param}={row!r}: expected an integer")
        if not 0 <= row < t.shape[0]:
            raise InvalidOptionError(
                f"{src}: {param}={row} is not a row of '{name}' (its {t.shape[0]} rows are 0..{t.shape[0] - 1})"
            )
        view = f"{name}[{row}]"
        # float types hold numpy shape `shape`; block types raw bytes [rows, row_bytes], a vector being one row
        data = t.data[row] if t.type in ("F32", "F16", "BF16") else t.data[row : row + 1]
        tensors[view] = reader.RawTensor(view, t.type, (int(t.shape[1]),), data)
        mapping[role] = view
        text = f"row {row} ({param}) of {{n}} tables taken, e.g. {{first}}"
        done.setdefault(text, []).append(f"{name} {list(t.shape)}")
    for text, names in done.items():
        notes.append(text.format(n=len(names), first=names[0], all=", ".join(names)))
    return dataclasses.replace(raw, tensors=tensors), mapping


def _split(src: str, t: reader.RawTensor, role: str, names: list[str] | None = None) -> list[reader.RawTensor]:
    """The parts of a tensor stacked along its first axis, as views, named `NAME[k]` (see `_transformed`): one per
    index of the axis, or with `names` that many equal parts of it, `NAME[name]`."""
    if "{k}" not in role:
        raise LayoutError(f"{src}: transform split for '{t.name}': its role {role!r} has no {{k}} for the part")
    if len(t.shape) < 2:
        raise LayoutError(f"{src}: transform split takes a stacked tensor apart, but '{t.name}' has one axis")
    n = int(t.shape[0])
    if n < 1:
        raise LayoutError(f"{src}: transform split: '{t.name}' has shape {list(t.shape)}, no part to take apart")
    if names:
        if n % len(names):
            raise LayoutError(f"{src}: transform split into {len(names)} parts: '{t.name}' has {n} rows on its first "
                              "axis, not a multiple")
        step = n // len(names)
        # float types hold numpy shape `shape`; block types raw bytes [rows, row_bytes], rows over all outer axes
        rows = t.data if t.type in ("F32", "F16", "BF16") else t.data.reshape(n, -1, t.data.shape[-1])
        parts = []
        for k, part in enumerate(names):
            data = rows[k * step : (k + 1) * step]
            if t.type not in ("F32", "F16", "BF16"):
                data = data.reshape(-1, data.shape[-1])
            parts.append(reader.RawTensor(f"{t.name}[{part}]", t.type, (step, *(int(s) for s in t.shape[1:])), data))
        return parts
    # float types hold numpy shape `shape`; block types raw bytes [rows, row_bytes] with rows over all outer axes
    data = t.data if t.type in ("F32", "F16", "BF16") else t.data.reshape(n, -1, t.data.shape[-1])
    return [reader.RawTensor(f"{t.name}[{k}]", t.type, tuple(int(s) for s in t.shape[1:]), data[k]) for k in range(n)]


def _diagonal(src: str, t: reader.RawTensor) -> reader.RawTensor:
    """A depthwise kernel [C, 1, K] from a dense one [C, C, K] that is zero off its diagonal (in its stored type's
    values, read as F32); anything off the diagonal is refused naming the tensor."""
    if len(t.shape) != 3 or t.shape[0] != t.shape[1]:
        raise LayoutError(f"{src}: transform diagonal takes a [C, C, K] kernel, but '{t.name}' has shape "
                          f"{list(t.shape)}")
    C, _, K = (int(s) for s in t.shape)
    x = to_f32(t.type, t.data, t.shape)
    idx = np.arange(C)
    diag = x[idx, idx, :].copy()
    x = np.array(x, copy=True)
    x[idx, idx, :] = 0.0
    if np.any(x != 0):
        raise InvalidModelError(f"{src}: tensor '{t.name}' is not a depthwise kernel: it has values off its diagonal")
    return reader.RawTensor(f"{t.name}[diagonal]", "F32", (C, 1, K), diag.reshape(C, 1, K).astype(np.float32))


def _unfolded(src: str, t: reader.RawTensor, kind: str, arg: str) -> reader.RawTensor:
    """The upstream parameter back from a constant stored folded: ln x (`log`), ln(1/x - EPS) (`log_recip:EPS`),
    computed in float64 and stored F32; a value with no such preimage is refused naming the tensor."""

    x = to_f32(t.type, t.data, t.shape).astype(np.float64)
    if kind == "log_recip":
        with np.errstate(divide="ignore", invalid="ignore"):
            x = 1.0 / x - float(arg)
    if not np.all(np.isfinite(x)) or np.any(x <= 0):
        raise InvalidModelError(
            f"{src}: tensor '{t.name}' holds values that {kind}{':' + arg if arg else ''} cannot undo "
            "(the stored constant must be > 0, and 1/x above EPS)"
        )
    return reader.RawTensor(f"{t.name}[{kind}]", "F32", t.shape, np.log(x).astype(np.float32))


def layout_family(lm: LayoutMap) -> str:
    """The decoder family whose roles a layout map names: its own `family`, else the family of the
    architectures it accepts, else the first registered family."""
    if lm.family:
        return lm.family
    for a in families():
        if set(lm.architectures) & set(a.architectures):
            return a.name
    return family_names()[0]


def model_from_mapping(
    raw: reader.RawFile,
    layout_name: str,
    mapping: dict[str, str],
    notes: list[str],
    check_finite: bool = True,
    overrides: dict[str, Any] | None = None,
    quirks: dict[str, str] | None = None,
    family: str | None = None,
    read_metadata: bool = True,
    map_given: frozenset[str] = frozenset(),
) -> Model:
    """The Model of `raw` under `mapping` (role -> tensor name) for a decoder `family` (kzlab.arch; default the
    first registered); `quirks`: metadata the layout is known to write wrong (said once in the notes instead of
    a warning); `read_metadata=False`: the file's metadata is another part's, not read for the hyperparameters;
    `map_given`: the names in `overrides` that the layout map gave (the rest the user gave), for the notes."""
    src = str(raw.path)
    meta = raw.metadata if read_metadata else {}
    arch: Arch = get_arch(family or family_names()[0])
    shapes: dict[str, tuple[int, ...]] = {}
    hint = _kind_hint(arch.name)
    for role, name in mapping.items():
        kind = "linear" if role.endswith(hint) else None
        shapes[role] = _normalise(role, kind, raw.tensors[name])
    try:
        hp = arch.hparams_from(shapes, meta, src, quirks=quirks, notes=notes)
    except (IndexError, ValueError, TypeError, ZeroDivisionError, OverflowError) as e:
        # a tensor with too few axes or a metadata value of the wrong kind: name it instead of a traceback
        raise InvalidModelError(f"{src}: tensor shapes or metadata do not describe a decoder: {e}") from None
    given: dict[str, Any] = {}
    if overrides:
        from kzlab.formats.given import describe
        from kzlab.formats.infer import apply_overrides

        hp = apply_overrides(hp, overrides, src)
        given = {k: getattr(hp, k) for k in overrides}
        # a note that a value was missing from the file is replaced by the value given for it
        notes[:] = [n for n in notes if not any(n.startswith(f"no {k} in the metadata") for k in given)]
        by_map = {k: v for k, v in given.items() if k in map_given}
        by_user = {k: v for k, v in given.items() if k not in map_given}
        if by_user:
            notes.append(f"hyperparameters given, not read from the file: {describe(by_user)}")
        if by_map:
            notes.append(f"hyperparameters given by the layout map {layout_name}, not read from the file: "
                         f"{describe(by_map)}")
    arch.check(hp, meta, set(mapping), src)
    roles = {r.name: r for r in arch.roles(hp)}
    extra = sorted(set(mapping) - set(roles))
    if extra:
        raise LayoutError(f"{src}: tensors map to roles this decoder does not have: {', '.join(extra[:8])}")
    weights: dict[str, Weight] = {}
    for role in roles.values():
        if role.name not in mapping:
            if role.optional:
                continue
            raise InvalidModelError(
                f"{src}: required tensor for role '{role.name}' (shape {list(role.shape)}) is missing"
            )
        t = raw.tensors[mapping[role.name]]
        weights[role.name] = _checked_weight(src, role, t)
    arch.finish_weights(weights, hp)
    if check_finite:
        for w in weights.values():
            bad = count_nonfinite(w.type, w.data)
            if bad:
                notes.append(f"tensor '{w.source}' ({w.role}) has {bad} NaN/Inf values")
                warnings.warn(f"{src}: tensor '{w.source}' ({w.role}) has {bad} NaN/Inf values", stacklevel=3)
    return Model(
        path=raw.path,
        layout=layout_name,
        hparams=hp,
        weights=weights,
        metadata=raw.metadata,
        file_size=raw.file_size,
        architecture=raw.architecture,
        kind=raw.kind,
        notes=notes,
        hparams_given=given,
    )


def _checked_weight(src: str, role: Role, t: reader.RawTensor) -> Weight:
    if t.type not in reader.SUPPORTED_TYPES:
        raise InvalidModelError(
            f"{src}: tensor '{t.name}' ({role.name}) has type {t.type}; kzlab computes with "
            f"{', '.join(reader.SUPPORTED_TYPES)}"
        )
    shape = t.shape
    if shape != role.shape:
        squeezed = tuple(d for d in shape if d != 1)
        want = tuple(d for d in role.shape if d != 1)
        if squeezed != want:
            raise InvalidModelError(
                f"{src}: tensor '{t.name}' ({role.name}) has shape {list(shape)}, expected {list(role.shape)}"
            )
        shape = role.shape
    if t.type == "Q8_0":
        if role.shape[-1] % QK8_0:
            raise InvalidModelError(
                f"{src}: tensor '{t.name}' is Q8_0 but its rows ({role.shape[-1]}) are not blocks of 32"
            )
        data = t.data
    else:
        data = t.data.reshape(shape)
    if role.kind in ("vector", "usage") and t.type != "F32":
        data, ttype = to_f32(t.type, t.data, shape), "F32"
        return Weight(role.name, t.name, ttype, shape, data)
    return Weight(role.name, t.name, t.type, shape, data)
