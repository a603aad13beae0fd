"""Records of Triton kernels: checked under Triton's interpreter where no GPU is, natively where one is. The
interpreter is chosen here, before any kernel of the package is decorated (protocol.triton_interpreter)."""

from protocol.triton_interpreter import interpret_without_gpu

interpret_without_gpu()
