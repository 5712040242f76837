"""Where compile events come from: ``dynamo_source`` holds every read of Dynamo's internals (the
compile-start callback, recompile reasons, compilation records), ``dynamo_guards`` re-checks Dynamo's
guard tree for every failed guard, ``dynamo_breaks`` lists graph breaks, ``dynamo_catalog`` reads Dynamo's
graph-break registry and guard kinds, ``dynamo_limit`` the recompile limit and where it was set,
``dynamo_dynamic`` what automatic dynamic made symbolic, ``tpu_source`` reads torch_tpu's cache counters;
``frames`` names the compiled function and describes its inputs, ``packages`` tells library code from the
user's by the packages' real locations."""
