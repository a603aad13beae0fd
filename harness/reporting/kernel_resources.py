"""The report's `kernels` section, rendered: ptxas's numbers for every catalogued CUDA kernel, which the CUDA
implementations compute (impls/cuda/resources.py answers the `pytest_attention_kernel_resources` hook), asked once
per run by the controller, and only by a run that collected CUDA records (backend cupy) or CUDA properties (a
module named *cuda* or *kernel*).

    {"compiler": "NVRTC 12.9", "architectures": ["sm_80", "sm_90"], "unavailable": null,
     "entries": [{"source", "entry", "arch", "registers", "shared_bytes", "spill_stores", "spill_loads",
                  "stack_bytes"}],
     "errors": [{"source", "arch", "error"}]}

Without NVRTC, `unavailable` says why and the lists are empty; a kernel that does not compile is an entry of
`errors` (the first error lines of NVRTC's log), never an exception.
"""

from __future__ import annotations

import html

from harness.engine.verdicts import RunState

NUMBERS = ("registers", "shared_bytes", "spill_stores", "spill_loads", "stack_bytes")
_CUDA_MODULE_WORDS = ("cuda", "kernel")


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
