"""Why a compile happened, in words: ``explain`` picks the failed guards against the nearest compiled
graph and merges same changes; ``guard_words``, ``guard_values`` and ``guard_objects`` put each guard in
words with the fix for the backend; ``cause`` holds the result; ``break_words`` does graph breaks.
Pure: text in, text out."""
