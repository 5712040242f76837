"""Bounding shapes: ``buckets`` pads to shape buckets and compares policies, ``advice`` finds the
buckets that pad least (1-D and batch x length), ``policies`` is the generation panel's menu."""
