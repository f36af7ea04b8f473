-- Block writers for the swap: a pair saved now would otherwise miss its new vector.
LOCK TABLE memory_pairs, subjects, memory_keys IN SHARE ROW EXCLUSIVE MODE;
