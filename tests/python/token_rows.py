"""Each sample's rows of a ragged or packed batch, for the tests that compare samples
across layouts (tests/python/test_packing.py, test_mix_ops.py)."""
import numpy as np


def split(values, lengths):
    """values cut into consecutive pieces of `lengths` rows."""
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return [values[offsets[i]:offsets[i + 1]] for i in range(len(lengths))]


def items(batch, field, lengths, count):
    """Per sample: its items' rows of ragged `field` (one `lengths` entry per item),
    concatenated, by the list's `count` field."""
    per_item = split(np.asarray(batch[lengths]), np.asarray(batch[count]))
    return split(np.asarray(batch[field]), [int(sum(x)) for x in per_item])


def tokens(batch, names):
    """Per token field of `names`, each sample's tokens: from its `_lengths` (unpadded), or
    from the packed rows ([rows, seq_len]: each row's samples one after another, as
    samples_per_row says), each segment checked against cu_seqlens."""
    lengths = np.asarray(batch["input_ids_lengths"])
    first = np.asarray(batch[names[0]])
    if first.ndim != 2 or "samples_per_row" not in batch:
        return {name: split(np.asarray(batch[name]), np.asarray(batch[name + "_lengths"]))
                for name in names}
    seq_len = first.shape[1]
    starts, s = [], 0
    for r, n in enumerate(np.asarray(batch["samples_per_row"])):
        at = r * seq_len
        for _ in range(n):
            starts.append(at)
            at += lengths[s]
            s += 1
    segments = set(np.asarray(batch["cu_seqlens"]).tolist())
    for start, length in zip(starts, lengths):
        assert start in segments and start + length in segments
    out = {}
    for name in names:
        values = np.asarray(batch[name])
        flat = values.reshape(-1, *values.shape[2:])
        out[name] = [flat[a:a + n] for a, n in zip(starts, lengths)]
    return out
