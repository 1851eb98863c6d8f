"""Step numbers inside the engine's call modes (shared by the engine and its call mixins)."""

# tag formats: the call header
NAME_START, NAME, NAME_END, INDEX, INDEX_TAIL, ID, ID_VALUE, ARGS_START, ARGS_BEGIN = range(9)
# tag formats: tagged arguments
T_BETWEEN, T_KEY, T_KEY_TRAIL, T_DECIDE, T_STRING, T_BUFFER = range(10, 16)
# tagged arguments whose values are literals (Python call syntax, JSON): a quoted string being
# streamed, or another literal being collected
T_LIT_STRING, T_LIT_BUFFER = range(16, 18)
# what `_follows_*` checks answer: the text continues the call, does not, or may still do
NO, YES, WAIT = range(3)
# JSON-object calls
W_OPEN, W_KEY_OR_END, W_KEY, W_COLON, W_VALUE, W_AFTER, W_SKIP, W_ARGS_STRING = range(20, 28)
# calls in a JSON array
A_OPEN, A_ITEM, A_AFTER = range(30, 33)
