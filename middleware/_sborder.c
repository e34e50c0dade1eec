/* The S_b orderer's compiled core: the same state machine as mop.PySbOrderer.
 *
 * Python dicts keyed by (pid, seqno) tuples cost a tuple hash and, past a few
 * hundred thousand held messages, several cache misses per operation; shuffled
 * input spends most of its time there.  Here a sender's pid is mapped once to a
 * small integer, and every table is open addressing over inline
 * (sender, seqno) keys: one probe sequence in one flat array per operation.
 *
 * Semantics (delivery order, duplicates, self-parents, eviction of the oldest
 * held message, the delivered-id state as a run plus loose values merged into
 * ranges) follow mop.py line for line; tests/core/test_mop.py runs both against each
 * other.  Memory comes from PyMem_*, so tracemalloc sees it.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#define NONE (-1)
#define COMPACT_MIN 2048

/* -- held messages and the parents they wait for ----------------------------- */

/* One node per message that is held, or that held messages wait for without it
 * having arrived (a placeholder: mid == NULL).  Replies hang off their parent's
 * node, so releasing a thread walks links and never searches a table.  A node
 * is one 64-byte cache line: with many messages held, each visit is one miss. */
typedef struct {
    uint64_t seqno;
    uint32_t sender;
    int32_t slot; /* its place in the node table, kept so that freeing needs no search */
    PyObject *mid, *parent, *payload; /* owned while held; mid is NULL in a placeholder */
    int32_t parent_node; /* while held: the node of the message it answers */
    int32_t first_child; /* held replies to this message, in arrival order */
    int32_t next_sibling, prev_sibling; /* the first reply's prev_sibling is the last */
    int32_t older, newer; /* held messages in arrival order; `newer` links the free list */
} Node;

_Static_assert(sizeof(Node) == 64, "a node should fill one cache line");
#define CACHE_LINE 64

/* -- open-addressing table: (sender, seqno) -> int32 ------------------------ */

#define EMPTY (-1)
#define GONE (-2) /* a removed key: probing goes on past it */

typedef struct {
    uint64_t seqno;
    uint32_t sender;
    int32_t value; /* >= 0, or EMPTY, or GONE */
} Slot;

typedef struct {
    Slot *slots;
    size_t mask; /* capacity - 1; capacity is a power of two, no slots when unused */
    size_t size; /* keys */
    size_t used; /* keys and GONE slots */
} Table;

static inline size_t
slot_hash(uint32_t sender, uint64_t seqno)
{
    /* splitmix64's finaliser: consecutive seqnos scatter over the whole table. */
    uint64_t x = seqno + 0x9E3779B97F4A7C15ULL * ((uint64_t)sender + 1);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return (size_t)(x ^ (x >> 31));
}

static void
table_free(Table *t)
{
    PyMem_Free(t->slots);
    memset(t, 0, sizeof(Table));
}

/* The slot holding the key, or -1. */
static inline Py_ssize_t
table_find(const Table *t, uint32_t sender, uint64_t seqno)
{
    if (t->size == 0)
        return -1;
    size_t i = slot_hash(sender, seqno) & t->mask;
    for (;;) {
        const Slot *s = &t->slots[i];
        if (s->value == EMPTY)
            return -1;
        if (s->seqno == seqno && s->sender == sender && s->value >= 0)
            return (Py_ssize_t)i;
        i = (i + 1) & t->mask;
    }
}

/* Place a key known to be absent in the first free slot of its probe run. */
static size_t
table_place(Table *t, uint32_t sender, uint64_t seqno, int32_t value)
{
    size_t i = slot_hash(sender, seqno) & t->mask;
    while (t->slots[i].value >= 0)
        i = (i + 1) & t->mask;
    if (t->slots[i].value == EMPTY)
        t->used++;
    t->slots[i].seqno = seqno;
    t->slots[i].sender = sender;
    t->slots[i].value = value;
    t->size++;
    return i;
}

/* Rebuild at a capacity that leaves the keys at most half the slots, dropping
 * GONE slots.  With `nodes`, values are node indexes whose `slot` follows. */
static int
table_rehash(Table *t, Node *nodes)
{
    size_t capacity = 16;
    while ((t->size + 1) * 2 > capacity)
        capacity *= 2;
    Slot *slots = PyMem_Malloc(capacity * sizeof(Slot));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < capacity; i++)
        slots[i].value = EMPTY;
    Table old = *t;
    t->slots = slots;
    t->mask = capacity - 1;
    t->size = t->used = 0;
    for (size_t i = 0; old.slots != NULL && i <= old.mask; i++) {
        if (old.slots[i].value < 0)
            continue;
        size_t at = table_place(t, old.slots[i].sender, old.slots[i].seqno, old.slots[i].value);
        if (nodes != NULL)
            nodes[old.slots[i].value].slot = (int32_t)at;
    }
    PyMem_Free(old.slots);
    return 0;
}

/* Insert a key known to be absent; return its slot, or -1 on error. */
static Py_ssize_t
table_add(Table *t, uint32_t sender, uint64_t seqno, int32_t value, Node *nodes)
{
    size_t capacity = t->slots == NULL ? 0 : t->mask + 1;
    if ((t->used + 1) * 8 > capacity * 5 && table_rehash(t, nodes) < 0)
        return -1;
    return (Py_ssize_t)table_place(t, sender, seqno, value);
}

static inline int
table_insert(Table *t, uint32_t sender, uint64_t seqno, int32_t value)
{
    return table_add(t, sender, seqno, value, NULL) < 0 ? -1 : 0;
}

/* Remove the key in slot i; a table a burst left mostly empty shrinks. */
static void
table_remove(Table *t, size_t i, Node *nodes)
{
    t->slots[i].value = GONE;
    t->size--;
    size_t capacity = t->mask + 1;
    if (t->size == 0)
        table_free(t);
    else if (capacity > 64 && t->size * 16 < capacity && table_rehash(t, nodes) < 0)
        PyErr_Clear(); /* the big table simply stays */
}

static inline void
table_remove_slot(Table *t, size_t i)
{
    table_remove(t, i, NULL);
}

/* -- one sender's delivered seqnos ----------------------------------------- */

/* A run [lo, hi) that in-order delivery extends, and `rest` beside it: sorted
 * disjoint ranges `bounds` ([b0, b1), [b2, b3), ...) plus `loose` values not yet
 * merged into them.  rest never holds a value in [lo, hi]. */
typedef struct {
    PyObject *pid; /* NULL when the slot is free */
    uint64_t lo, hi; /* lo == hi: nothing delivered yet */
    uint64_t *bounds;
    Py_ssize_t nbounds, bounds_capacity;
    Table loose;
    Py_ssize_t refs; /* held messages naming this sender, as sender or as parent */
} Sender;

static inline int
rest_is_empty(const Sender *s)
{
    return s->nbounds == 0 && s->loose.size == 0;
}

/* Index of the first bound greater than v: odd means v lies inside a range.
 * Branch-free, since lookups of shuffled seqnos defeat the branch predictor. */
static inline Py_ssize_t
bounds_upper(const uint64_t *bounds, Py_ssize_t n, uint64_t v)
{
    if (n == 0)
        return 0;
    const uint64_t *base = bounds;
    while (n > 1) {
        Py_ssize_t half = n >> 1;
        base = base[half] <= v ? base + half : base;
        n -= half;
    }
    return (base - bounds) + (*base <= v);
}

static inline int
rest_contains(const Sender *s, uint64_t v)
{
    return (bounds_upper(s->bounds, s->nbounds, v) & 1) || table_find(&s->loose, 0, v) >= 0;
}

static inline int
sender_contains(const Sender *s, uint64_t v)
{
    return (s->lo <= v && v < s->hi) || (!rest_is_empty(s) && rest_contains(s, v));
}

static int
bounds_reserve(Sender *s, Py_ssize_t n)
{
    if (n <= s->bounds_capacity)
        return 0;
    Py_ssize_t capacity = s->bounds_capacity ? s->bounds_capacity : 8;
    while (capacity < n)
        capacity *= 2;
    uint64_t *bounds = PyMem_Realloc(s->bounds, capacity * sizeof(uint64_t));
    if (bounds == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    s->bounds = bounds;
    s->bounds_capacity = capacity;
    return 0;
}

static int
compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Merge the loose values into the ranges in one linear pass. */
static int
rest_compact(Sender *s)
{
    if (s->loose.size == 0)
        return 0;
    size_t n = s->loose.size;
    uint64_t *values = PyMem_Malloc(n * sizeof(uint64_t));
    uint64_t *merged = PyMem_Malloc((s->nbounds + 2 * n) * sizeof(uint64_t));
    if (values == NULL || merged == NULL) {
        PyMem_Free(values);
        PyMem_Free(merged);
        PyErr_NoMemory();
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i <= s->loose.mask; i++)
        if (s->loose.slots[i].value >= 0)
            values[k++] = s->loose.slots[i].seqno;
    qsort(values, n, sizeof(uint64_t), compare_u64);
    Py_ssize_t m = 0, i = 0;
    size_t j = 0;
    while (i < s->nbounds || j < n) {
        uint64_t start, end;
        if (j >= n || (i < s->nbounds && s->bounds[i] <= values[j])) {
            start = s->bounds[i];
            end = s->bounds[i + 1];
            i += 2;
        }
        else {
            start = values[j];
            end = start + 1;
            j++;
        }
        if (m && merged[m - 1] >= start) {
            if (end > merged[m - 1])
                merged[m - 1] = end;
        }
        else {
            merged[m++] = start;
            merged[m++] = end;
        }
    }
    PyMem_Free(values);
    PyMem_Free(s->bounds);
    s->bounds = merged;
    s->nbounds = m;
    s->bounds_capacity = (Py_ssize_t)(s->nbounds + 2 * n);
    table_free(&s->loose);
    return 0;
}

/* Add v to rest: 1 if new, 0 if present, -1 on error.  `known_new` skips the
 * membership search, the costliest step with many gaps (a binary search whose
 * every probe can miss the cache), when the caller knows v is absent. */
static int
rest_add(Sender *s, uint64_t v, int known_new)
{
    Py_ssize_t n = s->nbounds;
    if (n && s->bounds[n - 1] == v && (known_new || table_find(&s->loose, 0, v) < 0)) {
        s->bounds[n - 1] = v + 1;
        return 1;
    }
    if (n == 0 && s->loose.size == 0) {
        if (bounds_reserve(s, 2) < 0)
            return -1;
        s->bounds[0] = v;
        s->bounds[1] = v + 1;
        s->nbounds = 2;
        return 1;
    }
    if (!known_new && rest_contains(s, v))
        return 0;
    if (table_insert(&s->loose, 0, v, 0) < 0)
        return -1;
    Py_ssize_t limit = n >> 1 > COMPACT_MIN ? n >> 1 : COMPACT_MIN;
    if ((Py_ssize_t)s->loose.size > limit && rest_compact(s) < 0)
        return -1;
    return 1;
}

/* Remove the run of consecutive values starting at `start` from rest; return its end. */
static uint64_t
rest_take_run(Sender *s, uint64_t start)
{
    uint64_t end = start;
    for (;;) {
        Py_ssize_t slot = table_find(&s->loose, 0, end);
        if (slot >= 0) {
            table_remove_slot(&s->loose, (size_t)slot);
            end++;
            continue;
        }
        Py_ssize_t i = bounds_upper(s->bounds, s->nbounds, end);
        if (!(i & 1))
            return end;
        uint64_t stop = s->bounds[i];
        if (s->bounds[i - 1] == end) {
            memmove(&s->bounds[i - 1], &s->bounds[i + 1], (s->nbounds - i - 1) * sizeof(uint64_t));
            s->nbounds -= 2;
        }
        else {
            s->bounds[i] = end; /* values below `end` stay */
        }
        end = stop;
    }
}

/* Record v as delivered: 1 if new, 0 if already delivered, -1 on error.
 * `known_new`: the caller knows v was not delivered (it was held). */
static int
sender_add(Sender *s, uint64_t v, int known_new)
{
    if (s->lo == s->hi) { /* the first: rest is empty too */
        s->lo = v;
        s->hi = v + 1;
        return 1;
    }
    if (v == s->hi) {
        s->hi = v + 1;
        if (!rest_is_empty(s))
            s->hi = rest_take_run(s, s->hi);
        return 1;
    }
    if (s->lo <= v && v < s->hi)
        return 0;
    return rest_add(s, v, known_new);
}

/* Remove v if it is the highest delivered: 1 if removed, 0 if not the highest, -1 on error. */
static int
sender_forget_highest(Sender *s, uint64_t v)
{
    if (s->lo == s->hi || rest_compact(s) < 0)
        return s->lo == s->hi ? 0 : -1;
    Py_ssize_t n = s->nbounds;
    if (n && s->bounds[n - 1] > s->hi) { /* the highest lies in rest */
        if (s->bounds[n - 1] != v + 1)
            return 0;
        s->bounds[n - 1] = v;
        if (s->bounds[n - 2] == v)
            s->nbounds -= 2;
        return 1;
    }
    if (s->hi != v + 1)
        return 0;
    s->hi = v;
    if (s->lo == s->hi && n) { /* the run is gone: the highest range takes its place */
        s->lo = s->bounds[n - 2];
        s->hi = s->bounds[n - 1];
        s->nbounds -= 2;
    }
    return 1;
}

/* The delivered seqnos as sorted bounds, run included; caller frees. */
static uint64_t *
sender_bounds(Sender *s, Py_ssize_t *count)
{
    if (rest_compact(s) < 0)
        return NULL;
    uint64_t *out = PyMem_Malloc((s->nbounds + 2) * sizeof(uint64_t));
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    Py_ssize_t m = 0, i = 0;
    int run_placed = s->lo == s->hi;
    while (i < s->nbounds || !run_placed) {
        uint64_t start, end;
        if (run_placed || (i < s->nbounds && s->bounds[i] < s->lo)) {
            start = s->bounds[i];
            end = s->bounds[i + 1];
            i += 2;
        }
        else {
            start = s->lo;
            end = s->hi;
            run_placed = 1;
        }
        if (m && out[m - 1] >= start) {
            if (end > out[m - 1])
                out[m - 1] = end;
        }
        else {
            out[m++] = start;
            out[m++] = end;
        }
    }
    *count = m;
    return out;
}

/* -- held messages ---------------------------------------------------------- */

/* -- the orderer -------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *sender_ids; /* dict: pid -> int index into senders */
    Sender *senders;
    Py_ssize_t senders_used, senders_capacity;
    int32_t free_sender; /* a free slot's `refs` links the next free one */
    Node *nodes; /* aligned to a cache line within nodes_memory */
    void *nodes_memory;
    int32_t nodes_capacity, free_node;
    Table node_index; /* (sender, seqno) -> node */
    int32_t oldest, newest; /* held nodes, by arrival */
    int32_t *stack;
    Py_ssize_t stack_capacity;
    /* Each node's held bytes, beside the nodes so that a node stays one cache line. */
    uint32_t *node_sizes;
    PyObject *evicted_mids; /* list of (mid, parent) evicted since take_evicted() */
    PyObject *size_of; /* payload -> bytes held, called only to hold a message; or NULL */
    Py_ssize_t pending, max_held, evicted, duplicates, rejected;
    Py_ssize_t max_held_bytes, held_bytes;
} Orderer;

/* -- senders ---------------------------------------------------------------- */

static inline int
parse_mid(PyObject *mid, PyObject **pid, uint64_t *seqno, const char *what)
{
    if (!PyTuple_Check(mid) || PyTuple_GET_SIZE(mid) != 2) {
        PyErr_Format(PyExc_TypeError, "%s must be a (pid, seqno) tuple, not %.100R", what, mid);
        return -1;
    }
    PyObject *number = PyTuple_GET_ITEM(mid, 1);
    if (!PyLong_Check(number)) {
        PyErr_Format(PyExc_TypeError, "%s's seqno must be an int, not %.100R", what, number);
        return -1;
    }
    int overflow;
    long long value = PyLong_AsLongLongAndOverflow(number, &overflow);
    if (overflow || value < 0) {
        PyErr_Format(PyExc_ValueError, "%s's seqno must be in [0, 2**63 - 1], not %.100R", what, number);
        return -1;
    }
    *pid = PyTuple_GET_ITEM(mid, 0);
    *seqno = (uint64_t)value;
    return 0;
}

/* The sender's index, or -1 when unknown (-2 with an exception set). */
static inline Py_ssize_t
sender_lookup(Orderer *self, PyObject *pid)
{
    PyObject *index = PyDict_GetItemWithError(self->sender_ids, pid);
    if (index == NULL)
        return PyErr_Occurred() ? -2 : -1;
    return PyLong_AsSsize_t(index);
}

static Py_ssize_t
sender_register(Orderer *self, PyObject *pid)
{
    Py_ssize_t known = sender_lookup(self, pid);
    if (known != -1)
        return known;
    Py_ssize_t index;
    if (self->free_sender != NONE) {
        index = self->free_sender;
    }
    else {
        if (self->senders_used == self->senders_capacity) {
            Py_ssize_t capacity = self->senders_capacity ? self->senders_capacity * 2 : 8;
            if (capacity > UINT32_MAX) {
                PyErr_SetString(PyExc_OverflowError, "too many senders");
                return -2;
            }
            Sender *senders = PyMem_Realloc(self->senders, capacity * sizeof(Sender));
            if (senders == NULL) {
                PyErr_NoMemory();
                return -2;
            }
            self->senders = senders;
            self->senders_capacity = capacity;
        }
        index = self->senders_used;
    }
    PyObject *key = PyLong_FromSsize_t(index);
    if (key == NULL || PyDict_SetItem(self->sender_ids, pid, key) < 0) {
        Py_XDECREF(key);
        return -2;
    }
    Py_DECREF(key);
    if (index == self->free_sender)
        self->free_sender = (int32_t)self->senders[index].refs;
    else
        self->senders_used++;
    Sender *s = &self->senders[index];
    memset(s, 0, sizeof(Sender));
    s->pid = Py_NewRef(pid);
    return index;
}

/* Forget a sender no node names and nothing was delivered from (a parent named
 * by messages that were since evicted), so made-up pids cannot pile up. */
static void
sender_forget_if_unused(Orderer *self, uint32_t index)
{
    Sender *s = &self->senders[index];
    if (s->pid == NULL || s->refs > 0 || s->lo != s->hi)
        return;
    PyObject *pid = s->pid;
    s->pid = NULL;
    if (PyDict_DelItem(self->sender_ids, pid) < 0)
        PyErr_Clear(); /* cannot fail for a key we inserted; never leave an error set */
    Py_DECREF(pid);
    s->refs = self->free_sender;
    self->free_sender = (int32_t)index;
}


/* -- nodes ---------------------------------------------------------------------- */

static inline int32_t
node_find(Orderer *self, uint32_t sender, uint64_t seqno)
{
    Py_ssize_t slot = table_find(&self->node_index, sender, seqno);
    return slot < 0 ? NONE : self->node_index.slots[slot].value;
}

/* A new placeholder node for (sender, seqno), which must have none. */
static int32_t
node_new(Orderer *self, uint32_t sender, uint64_t seqno)
{
    if (self->free_node == NONE) {
        int32_t old = self->nodes_capacity;
        if (old >= INT32_MAX / 2) {
            PyErr_SetString(PyExc_OverflowError, "too many held messages");
            return NONE;
        }
        int32_t capacity = old ? old * 2 : 64;
        void *memory = PyMem_Malloc((size_t)capacity * sizeof(Node) + CACHE_LINE);
        uint32_t *sizes = memory ? PyMem_Realloc(self->node_sizes, (size_t)capacity * sizeof(uint32_t)) : NULL;
        if (sizes == NULL) {
            PyMem_Free(memory);
            PyErr_NoMemory();
            return NONE;
        }
        self->node_sizes = sizes;
        Node *nodes = (Node *)(((uintptr_t)memory + CACHE_LINE - 1) & ~(uintptr_t)(CACHE_LINE - 1));
        if (old)
            memcpy(nodes, self->nodes, (size_t)old * sizeof(Node));
        PyMem_Free(self->nodes_memory);
        self->nodes_memory = memory;
        self->nodes = nodes;
        self->nodes_capacity = capacity;
        for (int32_t i = capacity - 1; i >= old; i--) {
            nodes[i].newer = self->free_node;
            self->free_node = i;
        }
    }
    int32_t n = self->free_node;
    Py_ssize_t slot = table_add(&self->node_index, sender, seqno, n, self->nodes);
    if (slot < 0)
        return NONE;
    Node *x = &self->nodes[n];
    self->free_node = x->newer;
    x->seqno = seqno;
    x->sender = sender;
    x->mid = NULL;
    x->parent_node = x->first_child = x->next_sibling = x->prev_sibling = NONE;
    x->older = x->newer = NONE;
    x->slot = (int32_t)slot;
    self->node_sizes[n] = 0;
    self->senders[sender].refs++;
    return n;
}

static void
node_free(Orderer *self, int32_t n)
{
    Node *x = &self->nodes[n];
    uint32_t sender = x->sender;
    table_remove(&self->node_index, (size_t)x->slot, self->nodes);
    x->newer = self->free_node;
    self->free_node = n;
    self->senders[sender].refs--;
    sender_forget_if_unused(self, sender);
}

/* Take held node n out of the arrival order and its parent's replies; the
 * parent's placeholder goes when its last reply does.  Its references are the
 * caller's now, and n is a placeholder (still needed if replies wait for it). */
static void
node_unhold(Orderer *self, int32_t n)
{
    Node *nodes = self->nodes, *x = &nodes[n];
    if (x->older != NONE)
        nodes[x->older].newer = x->newer;
    else
        self->oldest = x->newer;
    if (x->newer != NONE)
        nodes[x->newer].older = x->older;
    else
        self->newest = x->older;
    self->pending--;
    self->held_bytes -= self->node_sizes[n];
    self->node_sizes[n] = 0;
    x->mid = NULL;

    int32_t p = x->parent_node;
    if (p == NONE) /* a release already took its parent away */
        return;
    Node *parent = &nodes[p];
    if (parent->first_child == n)
        parent->first_child = x->next_sibling;
    else
        nodes[x->prev_sibling].next_sibling = x->next_sibling;
    if (x->next_sibling != NONE)
        nodes[x->next_sibling].prev_sibling = x->prev_sibling;
    else if (parent->first_child != NONE) /* it was the last: the first now points at the new last */
        nodes[parent->first_child].prev_sibling = x->prev_sibling;
    x->parent_node = NONE;
    if (parent->first_child == NONE && parent->mid == NULL)
        node_free(self, p);
}

/* Drop held node n: its references go, and so does the node unless replies wait for it. */
static void
node_drop(Orderer *self, int32_t n)
{
    Node *x = &self->nodes[n];
    PyObject *mid = x->mid, *parent = x->parent, *payload = x->payload;
    node_unhold(self, n);
    if (self->nodes[n].first_child == NONE)
        node_free(self, n);
    Py_DECREF(mid);
    Py_DECREF(parent);
    Py_DECREF(payload);
}

/* Hold a message: n is its node if it has one already, p its parent's. */
static int
hold(Orderer *self, int32_t n, PyObject *mid, Py_ssize_t sender, uint64_t seqno, PyObject *parent,
     int32_t p, Py_ssize_t parent_sender, uint64_t parent_seqno, PyObject *payload, Py_ssize_t size)
{
    int created = n == NONE;
    if (created && (n = node_new(self, (uint32_t)sender, seqno)) == NONE)
        return -1;
    if (p == NONE && (p = node_new(self, (uint32_t)parent_sender, parent_seqno)) == NONE) {
        if (created)
            node_free(self, n);
        return -1;
    }
    Node *nodes = self->nodes, *x = &nodes[n], *parent_x = &nodes[p];
    x->mid = Py_NewRef(mid);
    x->parent = Py_NewRef(parent);
    x->payload = Py_NewRef(payload);
    x->parent_node = p;
    x->next_sibling = NONE;
    int32_t first = parent_x->first_child;
    if (first == NONE) {
        parent_x->first_child = n;
        x->prev_sibling = n;
    }
    else {
        int32_t last = nodes[first].prev_sibling;
        nodes[last].next_sibling = n;
        x->prev_sibling = last;
        nodes[first].prev_sibling = n;
    }
    x->older = self->newest;
    x->newer = NONE;
    if (self->newest != NONE)
        nodes[self->newest].newer = n;
    else
        self->oldest = n;
    self->newest = n;
    if (size > UINT32_MAX)
        size = UINT32_MAX; /* over any byte bound anyway */
    self->node_sizes[n] = (uint32_t)size;
    self->held_bytes += size;
    ++self->pending;
    while (self->pending > self->max_held || self->held_bytes > self->max_held_bytes) {
        /* Evict the oldest, and say which it was, so the caller can ask for it again. */
        Node *old = &self->nodes[self->oldest];
        if (PyList_GET_SIZE(self->evicted_mids) < self->max_held) { /* a caller that never asks costs no more */
            PyObject *record = PyTuple_Pack(2, old->mid, old->parent);
            if (record == NULL || PyList_Append(self->evicted_mids, record) < 0)
                PyErr_Clear(); /* out of memory: evict regardless, unreported, rather than grow */
            Py_XDECREF(record);
        }
        node_drop(self, self->oldest);
        self->evicted++;
    }
    return 0;
}

/* Push the replies waiting for node n, last first, so they pop in arrival order. */
static int
push_replies(Orderer *self, Py_ssize_t *depth, int32_t n)
{
    int32_t first = self->nodes[n].first_child;
    for (int32_t c = first == NONE ? NONE : self->nodes[first].prev_sibling; c != NONE;
         c = c == first ? NONE : self->nodes[c].prev_sibling) {
        if (*depth == self->stack_capacity) {
            Py_ssize_t capacity = self->stack_capacity ? self->stack_capacity * 2 : 64;
            int32_t *stack = PyMem_Realloc(self->stack, capacity * sizeof(int32_t));
            if (stack == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            self->stack = stack;
            self->stack_capacity = capacity;
        }
        self->nodes[c].parent_node = NONE; /* its parent's node goes before it is popped */
        self->stack[(*depth)++] = c;
    }
    return 0;
}

/* Node n's message was just delivered: deliver every held descendant, depth
 * first, parents first, and free their nodes. */
static int
release(Orderer *self, int32_t n, PyObject *out)
{
    Py_ssize_t depth = 0;
    if (push_replies(self, &depth, n) < 0)
        return -1;
    node_free(self, n);
    while (depth) {
        int32_t c = self->stack[--depth];
        Node *x = &self->nodes[c];
        /* Delivered before its node goes, which would otherwise forget a sender
         * that nothing was delivered from yet.  A held message was never delivered:
         * holding checks that, and nothing delivers a mid while it is held. */
        PyObject *delivery = PyTuple_New(3);
        if (delivery == NULL || sender_add(&self->senders[x->sender], x->seqno, 1) < 0) {
            Py_XDECREF(delivery);
            return -1;
        }
        PyTuple_SET_ITEM(delivery, 0, x->mid); /* the node's references move in */
        PyTuple_SET_ITEM(delivery, 1, x->parent);
        PyTuple_SET_ITEM(delivery, 2, x->payload);
        node_unhold(self, c);
        int failed = PyList_Append(out, delivery) < 0 || push_replies(self, &depth, c) < 0;
        Py_DECREF(delivery);
        node_free(self, c);
        if (failed)
            return -1;
    }
    return 0;
}

/* -- Python methods ----------------------------------------------------------- */

static inline void
prefetch_slot(const Table *t, Py_ssize_t sender, uint64_t seqno)
{
    if (sender >= 0)
        __builtin_prefetch(&t->slots[slot_hash((uint32_t)sender, seqno) & t->mask]);
}

/* What holding a message costs: `size` if given, else size_of(payload), else 0.  Only a
 * message about to be held pays for this.  -1 with an exception set on error. */
static Py_ssize_t
held_size(Orderer *self, PyObject *size, PyObject *payload)
{
    PyObject *computed = NULL;
    if (size == NULL || size == Py_None) {
        if (self->size_of == NULL)
            return 0;
        size = computed = PyObject_CallOneArg(self->size_of, payload);
        if (size == NULL)
            return -1;
    }
    Py_ssize_t value = -1;
    if (!PyLong_Check(size))
        PyErr_Format(PyExc_TypeError, "size must be an int, not %.100R", size);
    else if ((value = PyLong_AsSsize_t(size)) < 0 && !PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "size must not be negative");
    Py_XDECREF(computed);
    return PyErr_Occurred() ? -1 : value;
}

static PyObject *
receive_impl(Orderer *self, PyObject *mid, PyObject *parent, PyObject *payload, PyObject *size_arg)
{
    PyObject *pid, *parent_pid = NULL;
    uint64_t seqno, parent_seqno = 0;
    if (parse_mid(mid, &pid, &seqno, "mid") < 0)
        return NULL;
    if (parent != Py_None && parse_mid(parent, &parent_pid, &parent_seqno, "parent") < 0)
        return NULL;
    Py_ssize_t sender = sender_lookup(self, pid);
    Py_ssize_t parent_sender = parent_pid ? sender_lookup(self, parent_pid) : -1;
    if (sender == -2 || parent_sender == -2)
        return NULL;

    /* This message's node (held already, or awaited by replies) and its parent's.
     * With many messages held both probes miss the cache: issue them together. */
    int32_t n = NONE, p = NONE;
    if (self->node_index.size) {
        prefetch_slot(&self->node_index, sender, seqno);
        prefetch_slot(&self->node_index, parent_sender, parent_seqno);
        if (sender >= 0 && (n = node_find(self, (uint32_t)sender, seqno)) != NONE)
            __builtin_prefetch(&self->nodes[n]);
        if (parent_sender >= 0 && (p = node_find(self, (uint32_t)parent_sender, parent_seqno)) != NONE)
            __builtin_prefetch(&self->nodes[p]);
        if (n != NONE && self->nodes[n].mid != NULL) {
            self->duplicates++;
            return PyList_New(0);
        }
    }
    /* A parent with a node is not delivered (delivering a message frees its node), so
     * only a parent without one needs the search of its sender's delivered seqnos. */
    if (parent_pid != NULL && (parent_sender < 0 || p != NONE
                               || !sender_contains(&self->senders[parent_sender], parent_seqno))) {
        /* Its parent is not delivered, so it waits; unless it names itself, or its
         * mid was delivered before with another parent (never deliver twice). */
        if (parent_sender < 0 && (parent_sender = sender_register(self, parent_pid)) < 0)
            return NULL;
        if (sender < 0 && (sender = sender_register(self, pid)) < 0) {
            sender_forget_if_unused(self, (uint32_t)parent_sender);
            return NULL;
        }
        int failed = 0;
        Py_ssize_t size;
        if (sender == parent_sender && seqno == parent_seqno)
            self->rejected++;
        else if (sender_contains(&self->senders[sender], seqno))
            self->duplicates++;
        else if ((size = held_size(self, size_arg, payload)) < 0)
            failed = 1;
        else
            failed = hold(self, n, mid, sender, seqno, parent, p, parent_sender, parent_seqno, payload, size) < 0;
        sender_forget_if_unused(self, (uint32_t)sender);
        sender_forget_if_unused(self, (uint32_t)parent_sender);
        return failed ? NULL : PyList_New(0);
    }
    if (sender < 0 && (sender = sender_register(self, pid)) < 0)
        return NULL;
    int added = sender_add(&self->senders[sender], seqno, 0);
    if (added < 0)
        return NULL;
    if (!added) {
        self->duplicates++;
        return PyList_New(0);
    }
    PyObject *delivery = PyTuple_Pack(3, mid, parent, payload);
    if (delivery == NULL)
        return NULL;
    PyObject *out = PyList_New(1);
    if (out == NULL) {
        Py_DECREF(delivery);
        return NULL;
    }
    PyList_SET_ITEM(out, 0, delivery);
    if (n != NONE && release(self, n, out) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

static PyObject *
Orderer_receive(Orderer *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"mid", "parent", "payload", "size"};
    PyObject *values[4] = {NULL, NULL, Py_None, NULL};
    if (nargs > 4) {
        PyErr_Format(PyExc_TypeError, "receive() takes at most 4 arguments (%zd given)", nargs);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        values[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        Py_ssize_t i = 0;
        while (i < 4 && PyUnicode_CompareWithASCIIString(name, names[i]) != 0)
            i++;
        if (i == 4 || i < nargs) {
            PyErr_Format(PyExc_TypeError, "receive() got an unexpected or repeated argument %R", name);
            return NULL;
        }
        values[i] = args[nargs + k];
    }
    if (values[0] == NULL || values[1] == NULL) {
        PyErr_SetString(PyExc_TypeError, "receive() needs mid and parent");
        return NULL;
    }
    return receive_impl(self, values[0], values[1], values[2], values[3]);
}

static PyObject *
Orderer_mark_delivered(Orderer *self, PyObject *mid)
{
    PyObject *pid;
    uint64_t seqno;
    if (parse_mid(mid, &pid, &seqno, "mid") < 0)
        return NULL;
    Py_ssize_t sender = sender_register(self, pid);
    if (sender < 0)
        return NULL;
    int added = sender_add(&self->senders[sender], seqno, 0);
    if (added <= 0)
        return added < 0 ? NULL : PyList_New(0);
    PyObject *released = PyList_New(0);
    int32_t n = node_find(self, (uint32_t)sender, seqno);
    if (released == NULL || n == NONE)
        return released;
    if (self->nodes[n].mid != NULL) {
        /* Delivered without its payload: it stops waiting, and what answers it goes on. */
        int answered = self->nodes[n].first_child != NONE;
        node_drop(self, n);
        if (!answered)
            return released;
    }
    if (release(self, n, released) < 0)
        Py_CLEAR(released);
    return released;
}

static int lookup_mid(Orderer *self, PyObject *mid, Py_ssize_t *sender, uint64_t *seqno);

static PyObject *
Orderer_forget_delivered(Orderer *self, PyObject *mid)
{
    Py_ssize_t sender;
    uint64_t seqno;
    if (lookup_mid(self, mid, &sender, &seqno) < 0)
        return NULL;
    if (sender < 0)
        Py_RETURN_FALSE;
    int forgotten = sender_forget_highest(&self->senders[sender], seqno);
    if (forgotten < 0)
        return NULL;
    sender_forget_if_unused(self, (uint32_t)sender);
    return PyBool_FromLong(forgotten);
}

/* A mid's sender index (-1 if unknown) and seqno; -1 with an exception set if malformed. */
static int
lookup_mid(Orderer *self, PyObject *mid, Py_ssize_t *sender, uint64_t *seqno)
{
    PyObject *pid;
    if (parse_mid(mid, &pid, seqno, "mid") < 0)
        return -1;
    *sender = sender_lookup(self, pid);
    return *sender == -2 ? -1 : 0;
}

static PyObject *
Orderer_is_delivered(Orderer *self, PyObject *mid)
{
    Py_ssize_t sender;
    uint64_t seqno;
    if (lookup_mid(self, mid, &sender, &seqno) < 0)
        return NULL;
    return PyBool_FromLong(sender >= 0 && sender_contains(&self->senders[sender], seqno));
}

static PyObject *
Orderer_held(Orderer *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *out = PyList_New(0);
    for (int32_t n = self->oldest; out != NULL && n != NONE; n = self->nodes[n].newer) {
        PyObject *pair = PyTuple_Pack(2, self->nodes[n].mid, self->nodes[n].parent);
        if (pair == NULL || PyList_Append(out, pair) < 0)
            Py_CLEAR(out);
        Py_XDECREF(pair);
    }
    return out;
}

static PyObject *
Orderer_held_payload(Orderer *self, PyObject *mid)
{
    Py_ssize_t sender;
    uint64_t seqno;
    if (lookup_mid(self, mid, &sender, &seqno) < 0)
        return NULL;
    int32_t n = sender >= 0 ? node_find(self, (uint32_t)sender, seqno) : NONE;
    if (n == NONE || self->nodes[n].mid == NULL)
        Py_RETURN_NONE;
    return PyTuple_Pack(2, self->nodes[n].parent, self->nodes[n].payload);
}

static PyObject *
Orderer_waiting_for(Orderer *self, PyObject *Py_UNUSED(ignored))
{
    /* Placeholders are exactly the awaited parents that have not arrived. */
    PyObject *out = PySet_New(NULL);
    Table *index = &self->node_index;
    for (size_t i = 0; out != NULL && index->size && i <= index->mask; i++) {
        int32_t n = index->slots[i].value;
        if (n < 0 || self->nodes[n].mid != NULL)
            continue;
        if (PySet_Add(out, self->nodes[self->nodes[n].first_child].parent) < 0)
            Py_CLEAR(out);
    }
    return out;
}

/* A sender's delivered seqnos as a list of inclusive (first, last) ranges. */
static PyObject *
sender_ranges(Sender *s)
{
    Py_ssize_t n;
    uint64_t *bounds = sender_bounds(s, &n);
    PyObject *ranges = bounds ? PyList_New(n / 2) : NULL;
    for (Py_ssize_t i = 0; ranges != NULL && i < n; i += 2) {
        PyObject *range = Py_BuildValue("(KK)", (unsigned long long)bounds[i], (unsigned long long)(bounds[i + 1] - 1));
        if (range == NULL)
            Py_CLEAR(ranges);
        else
            PyList_SET_ITEM(ranges, i / 2, range);
    }
    PyMem_Free(bounds);
    return ranges;
}

static PyObject *
Orderer_delivered_ranges(Orderer *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *out = PyDict_New();
    for (Py_ssize_t index = 0; out != NULL && index < self->senders_used; index++) {
        Sender *s = &self->senders[index];
        if (s->pid == NULL || s->lo == s->hi)
            continue;
        PyObject *ranges = sender_ranges(s);
        if (ranges == NULL || PyDict_SetItem(out, s->pid, ranges) < 0)
            Py_CLEAR(out);
        Py_XDECREF(ranges);
    }
    return out;
}

/* `pid`'s state in *out, or NULL when nothing was delivered from it; -1 on error. */
static int
delivered_sender(Orderer *self, PyObject *pid, Sender **out)
{
    Py_ssize_t sender = sender_lookup(self, pid);
    if (sender == -2)
        return -1;
    *out = sender >= 0 && self->senders[sender].lo != self->senders[sender].hi ? &self->senders[sender] : NULL;
    return 0;
}

static PyObject *
Orderer_sender_ranges(Orderer *self, PyObject *pid)
{
    Sender *s;
    if (delivered_sender(self, pid, &s) < 0)
        return NULL;
    return s == NULL ? PyList_New(0) : sender_ranges(s);
}

static PyObject *
Orderer_highest_delivered(Orderer *self, PyObject *pid)
{
    Sender *s;
    if (delivered_sender(self, pid, &s) < 0)
        return NULL;
    if (s == NULL)
        return PyLong_FromLong(0);
    if (rest_compact(s) < 0)
        return NULL;
    uint64_t highest = s->hi - 1;
    if (s->nbounds && s->bounds[s->nbounds - 1] - 1 > highest)
        highest = s->bounds[s->nbounds - 1] - 1;
    return PyLong_FromUnsignedLongLong(highest);
}

static PyObject *
Orderer_take_evicted(Orderer *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *fresh = PyList_New(0);
    if (fresh == NULL)
        return NULL;
    PyObject *out = self->evicted_mids;
    self->evicted_mids = fresh;
    return out;
}

static PyObject *
Orderer_get_pending(Orderer *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->pending);
}

/* -- type ----------------------------------------------------------------------- */

static PyObject *
Orderer_new(PyTypeObject *type, PyObject *Py_UNUSED(args), PyObject *Py_UNUSED(kwargs))
{
    Orderer *self = (Orderer *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    /* The object is tracked already: a collection inside PyDict_New traverses it. */
    self->free_sender = self->free_node = self->oldest = self->newest = NONE;
    self->max_held = 100000;
    self->max_held_bytes = 64 * 1024 * 1024;
    self->sender_ids = PyDict_New();
    self->evicted_mids = PyList_New(0);
    if (self->sender_ids == NULL || self->evicted_mids == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int
Orderer_init(Orderer *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"max_held", "max_held_bytes", "size_of", NULL};
    Py_ssize_t max_held = 100000, max_held_bytes = 64 * 1024 * 1024;
    PyObject *size_of = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|nnO:SbOrderer", keywords, &max_held, &max_held_bytes, &size_of))
        return -1;
    if (size_of != Py_None && !PyCallable_Check(size_of)) {
        PyErr_SetString(PyExc_TypeError, "size_of must be callable or None");
        return -1;
    }
    Py_XSETREF(self->size_of, size_of == Py_None ? NULL : Py_NewRef(size_of));
    if (max_held < 1) {
        PyErr_SetString(PyExc_ValueError, "max_held must be at least 1");
        return -1;
    }
    if (max_held_bytes < 1) {
        PyErr_SetString(PyExc_ValueError, "max_held_bytes must be at least 1");
        return -1;
    }
    self->max_held = max_held;
    self->max_held_bytes = max_held_bytes;
    return 0;
}

static int
Orderer_traverse(Orderer *self, visitproc visit, void *arg)
{
    Py_VISIT(self->sender_ids);
    Py_VISIT(self->evicted_mids);
    Py_VISIT(self->size_of);
    for (int32_t n = self->oldest; n != NONE; n = self->nodes[n].newer) {
        Py_VISIT(self->nodes[n].mid);
        Py_VISIT(self->nodes[n].parent);
        Py_VISIT(self->nodes[n].payload);
    }
    for (Py_ssize_t i = 0; i < self->senders_used; i++)
        Py_VISIT(self->senders[i].pid);
    return 0;
}

/* Forget everything; idempotent, so the collector and dealloc may both call it. */
static int
Orderer_clear(Orderer *self)
{
    int32_t n = self->oldest;
    self->oldest = self->newest = NONE;
    self->pending = 0;
    self->held_bytes = 0;
    while (n != NONE) {
        Node *x = &self->nodes[n];
        n = x->newer;
        Py_CLEAR(x->mid);
        Py_CLEAR(x->parent);
        Py_CLEAR(x->payload);
    }
    table_free(&self->node_index);
    PyMem_Free(self->nodes_memory);
    self->nodes_memory = NULL;
    PyMem_Free(self->node_sizes);
    self->node_sizes = NULL;
    self->nodes = NULL;
    self->nodes_capacity = 0;
    self->free_node = NONE;
    for (Py_ssize_t i = 0; i < self->senders_used; i++) {
        Sender *s = &self->senders[i];
        if (s->pid != NULL) {
            Py_CLEAR(s->pid);
            PyMem_Free(s->bounds);
            table_free(&s->loose);
        }
    }
    PyMem_Free(self->senders);
    self->senders = NULL;
    self->senders_used = self->senders_capacity = 0;
    self->free_sender = NONE;
    Py_CLEAR(self->sender_ids);
    Py_CLEAR(self->evicted_mids);
    Py_CLEAR(self->size_of);
    return 0;
}

static void
Orderer_dealloc(Orderer *self)
{
    PyObject_GC_UnTrack(self);
    Orderer_clear(self);
    PyMem_Free(self->stack);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Orderer_methods[] = {
    {"receive", (PyCFunction)(void (*)(void))Orderer_receive, METH_FASTCALL | METH_KEYWORDS,
     "receive(mid, parent, payload=None, size=None) -> the deliveries this makes possible, in S_b order."},
    {"mark_delivered", (PyCFunction)Orderer_mark_delivered, METH_O,
     "Record mid as delivered without a payload; return the held messages it releases."},
    {"is_delivered", (PyCFunction)Orderer_is_delivered, METH_O, NULL},
    {"forget_delivered", (PyCFunction)Orderer_forget_delivered, METH_O,
     "Undo the delivery of mid if it is its sender's highest delivered seqno; False otherwise."},
    {"held", (PyCFunction)Orderer_held, METH_NOARGS, "(mid, parent) of every held message, oldest first."},
    {"held_payload", (PyCFunction)Orderer_held_payload, METH_O, "(parent, payload) of a held message, or None."},
    {"waiting_for", (PyCFunction)Orderer_waiting_for, METH_NOARGS,
     "Parents that held messages wait for and that have not arrived at all."},
    {"delivered_ranges", (PyCFunction)Orderer_delivered_ranges, METH_NOARGS,
     "Per sender, the delivered seqnos as inclusive (first, last) ranges."},
    {"sender_ranges", (PyCFunction)Orderer_sender_ranges, METH_O,
     "One sender's delivered seqnos as inclusive (first, last) ranges."},
    {"highest_delivered", (PyCFunction)Orderer_highest_delivered, METH_O, NULL},
    {"take_evicted", (PyCFunction)Orderer_take_evicted, METH_NOARGS,
     "(mid, parent) of the messages evicted since the last call, oldest first (the first max_held of them)."},
    {NULL},
};

static PyMemberDef Orderer_members[] = {
    {"max_held", T_PYSSIZET, offsetof(Orderer, max_held), READONLY, NULL},
    {"max_held_bytes", T_PYSSIZET, offsetof(Orderer, max_held_bytes), READONLY, NULL},
    {"held_bytes", T_PYSSIZET, offsetof(Orderer, held_bytes), READONLY, NULL},
    {"evicted", T_PYSSIZET, offsetof(Orderer, evicted), READONLY, NULL},
    {"duplicates", T_PYSSIZET, offsetof(Orderer, duplicates), READONLY, NULL},
    {"rejected", T_PYSSIZET, offsetof(Orderer, rejected), READONLY, NULL},
    {NULL},
};

static PyGetSetDef Orderer_getset[] = {
    {"pending", (getter)Orderer_get_pending, NULL, "How many messages are held, waiting for a parent.", NULL},
    {NULL},
};

static PyTypeObject OrdererType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "middleware._sborder.SbOrderer",
    .tp_basicsize = sizeof(Orderer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The S_b orderer's compiled core; see middleware.mop.",
    .tp_new = Orderer_new,
    .tp_init = (initproc)Orderer_init,
    .tp_dealloc = (destructor)Orderer_dealloc,
    .tp_traverse = (traverseproc)Orderer_traverse,
    .tp_clear = (inquiry)Orderer_clear,
    .tp_methods = Orderer_methods,
    .tp_members = Orderer_members,
    .tp_getset = Orderer_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "middleware._sborder",
    .m_doc = "The S_b orderer's compiled core (see middleware.mop).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__sborder(void)
{
    if (PyType_Ready(&OrdererType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "SbOrderer", (PyObject *)&OrdererType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
