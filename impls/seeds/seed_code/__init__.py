"""The seeds' own code, exactly as written (only imports added; repairs, where a record needs them, live in the
record that runs it). Python that runs as written is a module; code that does not is kept as source text; the
CUDA kernels are .cu files under cuda/."""
