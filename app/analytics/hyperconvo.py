"""ConvoKit's HyperConvo thread measures as numpy kernels over many threads at once.

ConvoKit (Cornell; Zhang, Culbertson and Paritosh 2017, "Characterizing online public
discussions through patterns of participant interactions") builds, per thread, a
hypergraph of the thread's first PREFIX messages in time order: the messages (c) and
the speakers (C, each the set of its messages), with reply edges c->c (a message to
its parent), C->c (a speaker to each message it replied to) and C->C (a speaker to each
speaker it replied to, itself included). It takes statistics of the degree
distributions and counts motifs, then again on the same prefix without its first
message ("mid-thread"); threads shorter than MIN_SIZE get none. resources/docs/thread-measures.md
defines every column as ConvoKit's `convokit.hyperconvo` computes it.

A thread contributes at most PREFIX messages, so a batch of threads is a dense
(threads x PREFIX) array, and every measure is a few array operations over the whole
batch (edge sets as bit masks, one per node): no loop over threads.
"""

from __future__ import annotations

PREFIX = 10  # ConvoKit's prefix_len
MIN_SIZE = 10  # ConvoKit's min_convo_len

# The degree distributions ConvoKit describes: (column stem, ConvoKit's name).
DEGREE_SERIES = (
    ("ss_out", "outdegree over C->C"),
    ("ss_in", "indegree over C->C"),
    ("su_out", "outdegree over C->c"),
    ("su_in", "indegree over C->c"),
    ("uu_in", "indegree over c->c"),
)
# (column suffix, ConvoKit's statistic, Spark type); `second` is null with one node, `entropy` with no edge.
DEGREE_STATS = (
    ("max", "max", "int"),
    ("argmax", "argmax", "int"),
    ("second", "2nd-largest", "int"),
    ("mean", "mean", "double"),
    ("nonzero", "prop-nonzero", "double"),
    ("entropy", "entropy", "double"),
)
MOTIFS = (
    ("reciprocity_motifs", "reciprocity motif"),
    ("external_reciprocity_motifs", "external reciprocity motif"),
    ("dyadic_motifs", "dyadic interaction motif"),
    ("incoming_triads", "incoming triads"),
    ("outgoing_triads", "outgoing triads"),
)
SCOPES = (("", ""), ("mid_", "mid-thread "))  # whole prefix, prefix without its first message


def columns() -> list[tuple[str, str, str]]:
    """Every HyperConvo column: (column name, Spark type, ConvoKit's feature name)."""
    found = []
    for scope, convokit_scope in SCOPES:
        for stem, series in DEGREE_SERIES:
            for suffix, stat, kind in DEGREE_STATS:
                found.append((f"hc_{scope}{stem}_{suffix}", kind, f"{stat}[{series} {convokit_scope}responses]"))
        motif_scope = " over mid-thread" if scope else ""
        for stem, motif in MOTIFS:
            found.append((f"hc_{scope}{stem}", "int", f"count[{motif}{motif_scope}]"))
    return found


def first_appearance(speaker):
    """Per slot, the index of its speaker among the row's speakers in order of first
    appearance (ConvoKit's hypernode order), and the number of speakers per row."""
    import numpy as np

    same = speaker[:, :, None] == speaker[:, None, :]
    first = np.argmax(same, axis=2)  # the first slot of each slot's speaker
    slots = np.arange(speaker.shape[1])
    is_new = first == slots
    index = np.cumsum(is_new, axis=1) - 1
    return np.take_along_axis(index, first, axis=1), is_new.sum(axis=1)


def degree_stats(degrees, length):
    """ConvoKit's statistics of each row's first `length` degrees (the rest is padding)."""
    import numpy as np

    valid = np.arange(degrees.shape[1]) < length[:, None]
    masked = np.where(valid, degrees, -1)
    total = np.where(valid, degrees, 0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(valid, degrees, 0) / total[:, None]
        entropy = -np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(axis=1)
    second = np.sort(masked, axis=1)[:, -2] if degrees.shape[1] > 1 else np.zeros(len(degrees), dtype=np.int64)
    return {
        "max": (masked.max(axis=1), None),
        "argmax": (np.argmax(masked, axis=1), None),
        "second": (second, length < 2),
        "mean": (total / length, None),
        "nonzero": (((degrees != 0) & valid).sum(axis=1) / length, None),
        "entropy": (entropy, total == 0),
    }


def hypergraph_measures(parent_slot, speaker):
    """The HyperConvo degree statistics and motif counts of each row's hypergraph.

    `parent_slot`: (threads x N) slot of each message's parent among the row's N, -1
    when it is not among them; `speaker`: (threads x N) any integer speaker codes. Slots
    are in ConvoKit's time order. Returns {column suffix: (values, null mask or None)}.

    N <= 16, so each node's edge set is a bit mask in one int32 per row: the loops below
    run over the N slots, each step one vector operation over all the threads.
    """
    import numpy as np

    t, n = parent_slot.shape
    spk, n_speakers = first_appearance(speaker)
    rows = np.arange(t)
    has_parent = parent_slot >= 0
    parent = np.maximum(parent_slot, 0)
    popcount = np.array([bin(v).count("1") for v in range(1 << n)], dtype=np.int64)
    speaker_bit = (1 << spk).astype(np.int32)
    # C->c: per speaker, the messages it replied to; C->C: per speaker, the speakers it replied to.
    to_message = np.zeros((t, n), dtype=np.int32)
    for i in range(n):
        to_message[rows, spk[:, i]] |= np.where(has_parent[:, i], 1 << parent[:, i], 0).astype(np.int32)
    to_speaker = np.zeros((t, n), dtype=np.int32)
    for v in range(n):
        to_speaker |= np.where((to_message >> v) & 1 == 1, speaker_bit[:, v:v + 1], 0)
    from_speaker = np.zeros((t, n), dtype=np.int32)  # per speaker, the speakers who replied to it
    for s in range(n):
        from_speaker |= ((to_speaker[:, s:s + 1] >> np.arange(n)) & 1) << s
    slots = np.arange(n)
    degrees = {
        "ss_out": (popcount[to_speaker], n_speakers),
        "ss_in": (popcount[from_speaker], n_speakers),
        "su_out": (popcount[to_message], n_speakers),
        "su_in": (np.stack([((to_message >> v) & 1).sum(axis=1) for v in range(n)], axis=1), np.full(t, n)),
        "uu_in": ((parent_slot[:, :, None] == slots).sum(axis=1), np.full(t, n)),
    }
    out = {}
    for stem, (values, length) in degrees.items():
        for suffix, value in degree_stats(values.astype(np.int64), length).items():
            out[f"{stem}_{suffix}"] = value

    # Reciprocity: a reply c2 -> c1, and a message of c1's speaker replying to c2.
    children_by = np.zeros((t, n, n), dtype=np.int64)  # [t, i, s]: replies to i written by s
    for x in range(n):
        children_by[rows, parent[:, x], spk[:, x]] += has_parent[:, x]
    parent_speaker = np.take_along_axis(spk, parent, axis=1)
    back = children_by[rows[:, None], slots, parent_speaker]
    reciprocity = np.where(has_parent, back, 0).sum(axis=1)
    # External reciprocity: x -> c2 -> c1 with c1 not by x's speaker.
    grand = np.take_along_axis(parent_slot, parent, axis=1)
    chained = has_parent & (grand >= 0)
    grand_speaker = np.take_along_axis(spk, np.maximum(grand, 0), axis=1)
    external = (chained & (grand_speaker != spk)).sum(axis=1)
    mutual = popcount[to_speaker & from_speaker & ~(1 << slots).astype(np.int32)].sum(axis=1) // 2
    ss_in, ss_out = degrees["ss_in"][0], degrees["ss_out"][0]
    motifs = {
        "reciprocity_motifs": reciprocity,
        "external_reciprocity_motifs": external,
        "dyadic_motifs": mutual,
        "incoming_triads": (ss_in * (ss_in - 1) // 2).sum(axis=1),
        "outgoing_triads": (ss_out * (ss_out - 1) // 2).sum(axis=1),
    }
    out.update({name: (values, None) for name, values in motifs.items()})
    return out


def prefix_measures(parent_slot, speaker) -> dict:
    """Every HyperConvo column (see `columns`) of threads given as their first PREFIX
    messages: {column name: (values, null mask or None)}."""
    import numpy as np

    whole = hypergraph_measures(parent_slot, speaker)
    # Without the first message: its replies lose their parent, the other slots move up one.
    rest = parent_slot[:, 1:]
    mid = hypergraph_measures(np.where(rest >= 1, rest - 1, -1), speaker[:, 1:])
    result = {f"hc_{name}": value for name, value in whole.items()}
    result.update({f"hc_mid_{name}": value for name, value in mid.items()})
    return result


# Threads per batch: the per-thread arrays take about 2 KB per thread.
BATCH = 50_000


def thread_prefix_measures(thread, order_rows, parent_pos, sender_code, k) -> dict:
    """HyperConvo columns for threads 0..k-1, null for threads under MIN_SIZE.

    `order_rows`: the valid rows in ConvoKit's order (thread, then time, ties by mid);
    `thread[row]`: the thread of a row; `parent_pos`: each row's parent row (-1 none).
    """
    import numpy as np

    ordered_thread = thread[order_rows]
    size = np.bincount(ordered_thread, minlength=k)
    starts = np.r_[0, np.cumsum(size)[:-1]]
    rank = np.arange(order_rows.size) - starts[ordered_thread]
    big = size >= MIN_SIZE
    chosen = big[ordered_thread] & (rank < PREFIX)
    rows = order_rows[chosen]
    big_threads = np.flatnonzero(big)
    m = big_threads.size
    slot = rank[chosen]
    slot_of_row = np.full(parent_pos.size, -1, dtype=np.int64)
    slot_of_row[rows] = slot
    # Rows come thread by thread, PREFIX per big thread (MIN_SIZE >= PREFIX), in slot order.
    parents = parent_pos[rows]
    parent_slot = np.where(parents >= 0, slot_of_row[np.maximum(parents, 0)], -1).reshape(m, PREFIX)
    speaker = sender_code[rows].reshape(m, PREFIX)
    names = [name for name, _, _ in columns()]
    values = {name: np.zeros(k, dtype=np.float64) for name in names}
    missing = {name: ~big for name in names}
    for start in range(0, m, BATCH):
        part = slice(start, start + BATCH)
        where = big_threads[part]
        for name, (column, nulls) in prefix_measures(parent_slot[part], speaker[part]).items():
            values[name][where] = column
            if nulls is not None:
                missing[name][where] = nulls
    return {name: (values[name], missing[name]) for name in names}
