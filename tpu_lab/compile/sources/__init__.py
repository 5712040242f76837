"""Where compile events come from: ``dynamo_source`` holds every read of Dynamo's internals (the
compile-start callback, recompile reasons, compilation and graph-break records), ``dynamo_guards``
re-checks Dynamo's guard tree for every failed guard, ``tpu_source`` reads torch_tpu's cache counters,
and ``frames`` names the compiled function and describes its inputs."""
