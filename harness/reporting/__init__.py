"""CONTRACT 2's outputs: report.json/.md/.html, figures, the CUDA kernels' resources, the
browser check of a report, and the comparison of two reports."""
