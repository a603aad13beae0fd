"""The report's `kernels` section: what ptxas gives every catalogued CUDA kernel (impls/cuda/catalogue.py) on
every architecture of impls/cuda/nvrtc.py, compiled once per run by the controller, and only by a run that
collected CUDA records (backend cupy) or CUDA properties (a module named *cuda* or *kernel*).

    {"compiler": "NVRTC 12.9", "architectures": ["sm_80", "sm_90"], "unavailable": null,
     "entries": [{"source", "entry", "arch", "registers", "shared_bytes", "spill_stores", "spill_loads",
                  "stack_bytes"}],
     "errors": [{"source", "arch", "error"}]}

Without NVRTC, `unavailable` says why and the lists are empty; a kernel that does not compile is an entry of
`errors` (the first error lines of NVRTC's log), never an exception.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from pathlib import Path

import impls
from harness.verdicts import RunState
from impls.cuda.launch import KernelSource
from impls.cuda.nvrtc import ARCHITECTURES, CompileError, NvrtcUnavailable, resources, version

ROOT = Path(impls.__file__).resolve().parent.parent
NUMBERS = ("registers", "shared_bytes", "spill_stores", "spill_loads", "stack_bytes")
_CUDA_MODULE_WORDS = ("cuda", "kernel")


def _source(kernel: KernelSource) -> str:
    path = kernel.path.resolve()
    return str(path.relative_to(ROOT)) if ROOT in path.parents else str(path)


def first_errors(log: str, limit: int = 4) -> str:
    """The first `limit` lines of a compiler log that name an error (else its first lines)."""
    lines = [line.rstrip() for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return "\n".join((errors or lines)[:limit])


def kernel_section(kernels: Iterable[KernelSource] | None = None,
                   architectures: Iterable[str] = ARCHITECTURES) -> dict:
    """ptxas's numbers for every entry of `kernels` (default: the catalogue) on every architecture."""
    if kernels is None:
        from impls.cuda.catalogue import KERNELS

        kernels = KERNELS
    architectures = list(architectures)
    section = {"compiler": None, "architectures": architectures, "unavailable": None, "entries": [], "errors": []}
    try:
        section["compiler"] = f"NVRTC {version()}"
        for kernel in kernels:
            for arch in architectures:
                _compile_one(kernel, arch, section)
    except NvrtcUnavailable as exc:
        return {**section, "compiler": None, "unavailable": str(exc), "entries": [], "errors": []}
    return section


def _compile_one(kernel: KernelSource, arch: str, section: dict) -> None:
    source = _source(kernel)
    try:
        found = resources(kernel, arch)
    except NvrtcUnavailable:
        raise
    except CompileError as exc:
        section["errors"].append({"source": source, "arch": arch, "error": first_errors(str(exc))})
        return
    except Exception as exc:  # an unreadable file, a name expression NVRTC cannot lower: the kernel's failure
        section["errors"].append({"source": source, "arch": arch, "error": f"{type(exc).__name__}: {exc}"})
        return
    reported = {r.kernel for r in found}
    for r in sorted(found, key=lambda r: kernel.entries.index(r.kernel)):
        section["entries"].append({"source": source, "entry": r.kernel, "arch": r.arch,
                                   **{key: getattr(r, key) for key in NUMBERS}})
    for entry in kernel.entries:
        if entry not in reported:
            section["errors"].append({"source": source, "arch": arch,
                                      "error": f"ptxas reported no resources for {entry}"})


def _cuda_property(prop: str) -> bool:
    module = prop.partition("::")[0].rpartition(".")[2]
    return any(word in module for word in _CUDA_MODULE_WORDS)


def wanted(state: RunState) -> bool:
    """Whether the run collected a CUDA record (backend cupy) or a CUDA property."""
    cuda_subjects = {v.name for v in state.variants if v.impl.backend == "cupy"}
    return any(subject in cuda_subjects or any(map(_cuda_property, props))
               for (_, subject), props in state.collected.items())


def summary_line(section: dict) -> str:
    """One line for the terminal."""
    if section["unavailable"]:
        return f"kernel resources: not compiled ({section['unavailable']})"
    entries = section["entries"]
    worst = max(entries, key=lambda e: e["registers"], default=None)
    spilling = sum(1 for e in entries if e["spill_stores"] or e["spill_loads"])
    most = f"; most registers {worst['registers']} ({worst['entry']}, {worst['arch']})" if worst else ""
    return (f"kernel resources ({section['compiler']}, {', '.join(section['architectures'])}): "
            f"{len(entries)} entries{most}, {spilling} spilling, {len(section['errors'])} compile errors")


def markdown_lines(section: dict) -> list[str]:
    out = ["## Kernel resources", ""]
    if section["unavailable"]:
        return out + [f"Not compiled: {section['unavailable']}", ""]
    out += [f"ptxas via {section['compiler']}, per architecture (shared: static bytes).", "",
            "| source | entry | arch | registers | shared | spill stores | spill loads | stack |",
            "|---|---|---|---|---|---|---|---|"]
    out += [f"| `{e['source']}` | `{e['entry']}` | {e['arch']} | "
            + " | ".join(str(e[key]) for key in NUMBERS) + " |" for e in section["entries"]]
    for error in section["errors"]:
        out += ["", f"Does not compile: `{error['source']}` ({error['arch']})", "", "```", error["error"], "```"]
    return out + [""]


def html_section(section: dict) -> str:
    esc = html.escape
    if section["unavailable"]:
        return f"<h2>Kernel resources</h2><p>Not compiled: {esc(section['unavailable'])}</p>"
    head = "".join(f"<th>{name}</th>" for name in ("source", "entry", "arch", *NUMBERS))
    rows = "".join(
        f"<tr><td><code>{esc(e['source'])}</code></td><td><code>{esc(e['entry'])}</code></td><td>{e['arch']}</td>"
        + "".join(f"<td>{e[key]}</td>" for key in NUMBERS) + "</tr>" for e in section["entries"])
    errors = "".join(f"<details><summary>does not compile: <code>{esc(e['source'])}</code> ({e['arch']})"
                     f"</summary><pre>{esc(e['error'])}</pre></details>" for e in section["errors"])
    return (f"<h2>Kernel resources</h2><p>ptxas via {esc(section['compiler'])}</p>"
            f"<table><tr>{head}</tr>{rows}</table>{errors}")
