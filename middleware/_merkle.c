/* Compiled Merkle trees for middleware.crypto: the per-message part of burst signing.
 *
 * Every chat message is a leaf of its datagram's tree, at the sender and at every
 * receiver, and every message's proof (signature, index, sibling hashes) is built to be
 * kept for relaying.  In Python that took about a fifth of a peer's CPU per message;
 * here it is a few SHA-256 compressions (OpenSSL's, which uses the CPU's SHA
 * instructions where there are any).
 *
 * The trees are those of crypto.py, which keeps the pure-Python version and says what
 * they mean: leaf = SHA-256(0x00 || message), node = SHA-256(0x01 || left || right), a
 * level of odd length pairs its last node with itself.  `levels` is every level below the
 * root, each padded to even length, from the leaves up, as one bytes object.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <openssl/evp.h>
#include <string.h>

#define HASH 32
#define MAX_LEAVES 4096
#define MAX_DEPTH 13 /* ceil(log2(MAX_LEAVES)) + 1 */

/* The padded size of each level below the root for `count` leaves; returns the depth. */
static int level_sizes(Py_ssize_t count, Py_ssize_t sizes[MAX_DEPTH])
{
    int depth = 0;
    while (count > 1) {
        count += count & 1;
        sizes[depth++] = count;
        count /= 2;
    }
    return depth;
}

/* SHA-256 fetched once: OpenSSL 3's one-shot SHA256() looks the algorithm up on every
 * call, which cost more than hashing a short message. The module holds the GIL
 * throughout, so one context serves every call. */
static EVP_MD *sha256;
static EVP_MD_CTX *context;

static int digest(const unsigned char *prefix, const unsigned char *data, size_t size, unsigned char *out)
{
    return EVP_DigestInit_ex2(context, sha256, NULL) && EVP_DigestUpdate(context, prefix, 1)
        && EVP_DigestUpdate(context, data, size) && EVP_DigestFinal_ex(context, out, NULL);
}

static const unsigned char LEAF = 0, NODE = 1;

static int hash_node(const unsigned char *left, const unsigned char *right, unsigned char *out)
{
    /* The two children lie side by side in the levels buffer. */
    if (right == left + HASH)
        return digest(&NODE, left, 2 * HASH, out);
    unsigned char pair[2 * HASH];
    memcpy(pair, left, HASH);
    memcpy(pair + HASH, right, HASH);
    return digest(&NODE, pair, sizeof pair, out);
}

static PyObject *hash_failed(void)
{
    return PyErr_Format(PyExc_RuntimeError, "OpenSSL's SHA-256 failed");
}

/* tree(messages) -> (root, levels) */
static PyObject *merkle_tree(PyObject *module, PyObject *messages)
{
    PyObject *seq = PySequence_Fast(messages, "messages must be a sequence of bytes");
    if (seq == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    if (count < 1 || count > MAX_LEAVES) {
        Py_DECREF(seq);
        return PyErr_Format(PyExc_ValueError, "a tree has 1..%d leaves, got %zd", MAX_LEAVES, count);
    }
    Py_ssize_t sizes[MAX_DEPTH];
    int depth = level_sizes(count, sizes);
    Py_ssize_t total = 0;
    for (int h = 0; h < depth; h++)
        total += sizes[h];
    PyObject *levels = PyBytes_FromStringAndSize(NULL, total * HASH);
    unsigned char root[HASH];
    unsigned char *level = NULL, *only_leaf = root;
    if (levels == NULL)
        goto fail;
    level = (unsigned char *)PyBytes_AS_STRING(levels);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyBytes_Check(item)) {
            PyErr_Format(PyExc_TypeError, "message %zd is %.80s, not bytes", i, Py_TYPE(item)->tp_name);
            goto fail;
        }
        if (!digest(&LEAF, (const unsigned char *)PyBytes_AS_STRING(item), PyBytes_GET_SIZE(item),
                    depth ? level + i * HASH : only_leaf)) {
            hash_failed();
            goto fail;
        }
    }
    /* Each level: pad, then hash pairs into the next (or into the root). */
    for (int h = 0; h < depth; h++) {
        Py_ssize_t filled = h == 0 ? count : sizes[h - 1] / 2;
        if (filled < sizes[h])
            memcpy(level + filled * HASH, level + (filled - 1) * HASH, HASH);
        unsigned char *next = level + sizes[h] * HASH;
        for (Py_ssize_t j = 0; j < sizes[h]; j += 2) {
            if (!hash_node(level + j * HASH, level + (j + 1) * HASH, h + 1 < depth ? next + (j / 2) * HASH : root)) {
                hash_failed();
                goto fail;
            }
        }
        level = next;
    }
    Py_DECREF(seq);
    PyObject *root_bytes = PyBytes_FromStringAndSize((const char *)root, HASH);
    if (root_bytes == NULL) {
        Py_DECREF(levels);
        return NULL;
    }
    PyObject *result = PyTuple_Pack(2, root_bytes, levels);
    Py_DECREF(root_bytes);
    Py_DECREF(levels);
    return result;
fail:
    Py_XDECREF(levels);
    Py_DECREF(seq);
    return NULL;
}

/* proofs(levels, count, signature, high, top) -> [signature || index (2 bytes) || siblings || top]
 * for leaves 0..count-1, where index = high << depth | leaf. */
static PyObject *merkle_proofs(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5)
        return PyErr_Format(PyExc_TypeError, "proofs() takes 5 arguments, got %zd", nargs);
    PyObject *levels = args[0], *signature = args[2], *top = args[4];
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    long high = PyLong_AsLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (!PyBytes_Check(levels) || !PyBytes_Check(signature) || !PyBytes_Check(top))
        return PyErr_Format(PyExc_TypeError, "levels, signature and top must be bytes");
    if (count < 1 || count > MAX_LEAVES)
        return PyErr_Format(PyExc_ValueError, "a tree has 1..%d leaves, got %zd", MAX_LEAVES, count);
    Py_ssize_t sizes[MAX_DEPTH], starts[MAX_DEPTH], total = 0;
    int depth = level_sizes(count, sizes);
    for (int h = 0; h < depth; h++) {
        starts[h] = total;
        total += sizes[h];
    }
    if (PyBytes_GET_SIZE(levels) != total * HASH)
        return PyErr_Format(PyExc_ValueError, "levels of %zd bytes do not fit %zd leaves", PyBytes_GET_SIZE(levels), count);
    long index_high = high << depth;
    if (high < 0 || index_high + count - 1 > 0xFFFF)
        return PyErr_Format(PyExc_ValueError, "a proof's index must fit 2 bytes");
    Py_ssize_t signature_size = PyBytes_GET_SIZE(signature), top_size = PyBytes_GET_SIZE(top);
    Py_ssize_t proof_size = signature_size + 2 + depth * HASH + top_size;
    const char *tree = PyBytes_AS_STRING(levels);
    PyObject *result = PyList_New(count);
    if (result == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *proof = PyBytes_FromStringAndSize(NULL, proof_size);
        if (proof == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        char *out = PyBytes_AS_STRING(proof);
        memcpy(out, PyBytes_AS_STRING(signature), signature_size);
        out += signature_size;
        long index = index_high | i;
        *out++ = (char)(index >> 8);
        *out++ = (char)(index & 0xFF);
        for (int h = 0; h < depth; h++) {
            memcpy(out, tree + (starts[h] + ((i >> h) ^ 1)) * HASH, HASH);
            out += HASH;
        }
        memcpy(out, PyBytes_AS_STRING(top), top_size);
        PyList_SET_ITEM(result, i, proof);
    }
    return result;
}

/* Proofs kept in the store, each written against the one before it (compact_proofs):
 * messages stored together mostly come from one datagram, so their proofs share the
 * signature and the upper sibling hashes; only the index and a hash or two differ.
 *   flags (1 byte): 1 = same signature as the previous proof, 2 = stored whole
 *   shared (1 byte): how many trailing 32-byte hashes equal the previous proof's
 *   then the proof's own bytes: [signature unless flag 1] index, siblings...
 * Anything too short to be a proof (tests store a few bytes) is stored whole. */
#define SIGNATURE 64
#define HEAD (SIGNATURE + 2)

static PyObject *compact_proofs(PyObject *module, PyObject *proofs)
{
    PyObject *seq = PySequence_Fast(proofs, "proofs must be a sequence of bytes");
    if (seq == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject *result = PyList_New(count);
    const char *previous = NULL;
    Py_ssize_t previous_size = 0;
    if (result == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyBytes_Check(item)) {
            PyErr_Format(PyExc_TypeError, "proof %zd is %.80s, not bytes", i, Py_TYPE(item)->tp_name);
            goto fail;
        }
        const char *proof = PyBytes_AS_STRING(item);
        Py_ssize_t size = PyBytes_GET_SIZE(item);
        unsigned char flags = 0, shared = 0;
        Py_ssize_t start = 0, end = size;
        if (size < HEAD || (size - HEAD) % HASH) {
            flags = 2;
        } else if (previous != NULL) {
            if (memcmp(proof, previous, SIGNATURE) == 0) {
                flags = 1;
                start = SIGNATURE;
            }
            Py_ssize_t limit = (size - HEAD) / HASH, other = (previous_size - HEAD) / HASH;
            if (other < limit)
                limit = other;
            while (shared < limit && memcmp(proof + end - HASH, previous + previous_size - (shared + 1) * HASH, HASH) == 0) {
                shared++;
                end -= HASH;
            }
        }
        PyObject *out = PyBytes_FromStringAndSize(NULL, 2 + end - start);
        if (out == NULL)
            goto fail;
        char *bytes = PyBytes_AS_STRING(out);
        bytes[0] = (char)flags;
        bytes[1] = (char)shared;
        memcpy(bytes + 2, proof + start, end - start);
        PyList_SET_ITEM(result, i, out);
        if (flags != 2) {
            previous = proof;
            previous_size = size;
        }
    }
    Py_DECREF(seq);
    return result;
fail:
    Py_XDECREF(result);
    Py_DECREF(seq);
    return NULL;
}

static PyObject *expand_proofs(PyObject *module, PyObject *compact)
{
    PyObject *seq = PySequence_Fast(compact, "compact proofs must be a sequence of bytes");
    if (seq == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject *result = PyList_New(count);
    PyObject *previous = NULL; /* borrowed from result */
    if (result == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyBytes_Check(item) || PyBytes_GET_SIZE(item) < 2) {
            PyErr_Format(PyExc_ValueError, "compact proof %zd is not one", i);
            goto fail;
        }
        const unsigned char *bytes = (const unsigned char *)PyBytes_AS_STRING(item);
        Py_ssize_t own = PyBytes_GET_SIZE(item) - 2;
        unsigned char flags = bytes[0], shared = bytes[1];
        Py_ssize_t previous_size = previous ? PyBytes_GET_SIZE(previous) : 0;
        int same_signature = flags == 1;
        if (flags > 2 || (flags == 2 && shared) || ((same_signature || shared) && previous == NULL)
            || (previous != NULL && shared * HASH > previous_size - HEAD)) {
            PyErr_Format(PyExc_ValueError, "compact proof %zd does not fit the one before it", i);
            goto fail;
        }
        Py_ssize_t size = (same_signature ? SIGNATURE : 0) + own + shared * HASH;
        PyObject *proof = PyBytes_FromStringAndSize(NULL, size);
        if (proof == NULL)
            goto fail;
        char *out = PyBytes_AS_STRING(proof);
        if (same_signature) {
            memcpy(out, PyBytes_AS_STRING(previous), SIGNATURE);
            out += SIGNATURE;
        }
        memcpy(out, bytes + 2, own);
        out += own;
        if (shared)
            memcpy(out, PyBytes_AS_STRING(previous) + previous_size - shared * HASH, shared * HASH);
        PyList_SET_ITEM(result, i, proof);
        if (flags != 2)
            previous = proof;
    }
    Py_DECREF(seq);
    return result;
fail:
    Py_XDECREF(result);
    Py_DECREF(seq);
    return NULL;
}

static PyMethodDef methods[] = {
    {"tree", merkle_tree, METH_O, "tree(messages) -> (root, levels): the Merkle tree over messages (bytes)."},
    {"proofs", (PyCFunction)(void (*)(void))merkle_proofs, METH_FASTCALL,
     "proofs(levels, count, signature, high, top) -> each leaf's proof."},
    {"compact_proofs", compact_proofs, METH_O, "compact_proofs(proofs) -> each proof written against the one before."},
    {"expand_proofs", expand_proofs, METH_O, "expand_proofs(compact) -> the proofs compact_proofs was given."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "middleware._merkle", NULL, -1, methods};

PyMODINIT_FUNC PyInit__merkle(void)
{
    if (sha256 == NULL) {
        sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
        context = EVP_MD_CTX_new();
        if (sha256 == NULL || context == NULL)
            return PyErr_Format(PyExc_ImportError, "OpenSSL has no SHA-256");
    }
    return PyModule_Create(&module);
}
