"""Implementations in NumPy: the float64 reference, tiled, paged and split-KV attention, the online
softmax they share."""
