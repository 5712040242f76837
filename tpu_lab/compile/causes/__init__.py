"""Why a compile happened, in words: ``explain`` picks the failed guards against the nearest compiled
graph and merges same changes; ``guard_words`` puts each guard in words with the fix for the backend,
with ``guard_sizes`` (tensor sizes), ``guard_values`` (values, dispatch keys, tensor kinds),
``guard_containers`` (lengths, keys, keyword arguments) and ``guard_objects`` (types, identities);
``cause`` holds the result; ``break_words`` does graph breaks. Pure: text in, text out."""
