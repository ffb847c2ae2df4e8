/* kvroute's chained block hash (kvroute/trace/hashing.py) for one prompt, in C.
 *
 * The numpy version in hashing.py is the definition and is fast on large batches; on
 * one short prompt (the gateway hashes a request's prompt as it routes or captures
 * it) numpy's per-call cost is most of the work. This computes the same values with
 * a plain loop: for each block of B tokens,
 *
 *     content = mix(sum_k token_k * W_k + len * M2)     W_k = mix((k + 1) * POS) | 1
 *     h       = parent * P + content                    (all modulo 2**64)
 *
 * hashing.py's constants, restated here; tests/trace/test_chainhash.py checks both
 * against each other on random prompts. Built by scripts/build-native; kvroute falls
 * back to numpy when the build is missing or stale (kvroute/trace/hashing.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define CH_P 0x9E3779B97F4A7C15ULL
#define CH_M1 0xBF58476D1CE4E5B9ULL
#define CH_M2 0x94D049BB133111EBULL
#define CH_POS 0xD6E8FEB86659FD93ULL
#define CH_MAX_BLOCK 4096

static inline uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= CH_M1;
    x ^= x >> 27;
    x *= CH_M2;
    x ^= x >> 31;
    return x;
}

/* Position weights, computed once up to the largest block size asked for. */
static uint64_t weights[CH_MAX_BLOCK];
static Py_ssize_t num_weights = 0;

static void ensure_weights(Py_ssize_t n) {
    for (; num_weights < n; num_weights++)
        weights[num_weights] = mix((uint64_t)(num_weights + 1) * CH_POS) | 1ULL;
}

/* Token i of a buffer of one of the integer formats numpy arrays and array.array
 * give, as uint64 (a negative value wraps, as numpy's astype(uint64) does). */
typedef uint64_t (*reader)(const char *, Py_ssize_t);
#define READER(name, type) \
    static uint64_t name(const char *p, Py_ssize_t i) { return (uint64_t)((const type *)p)[i]; }
READER(read_u8, uint8_t)
READER(read_u16, uint16_t)
READER(read_u32, uint32_t)
READER(read_u64, uint64_t)
READER(read_i8, int8_t)
READER(read_i16, int16_t)
READER(read_i32, int32_t)
READER(read_i64, int64_t)

static reader reader_for(const Py_buffer *view) {
    const char *f = view->format ? view->format : "B";
    if (*f == '@' || *f == '=' || *f == '<') f++;  /* native or little-endian only */
    if (f[0] == '\0' || f[1] != '\0') return NULL;
    int is_signed = (*f == 'b' || *f == 'h' || *f == 'i' || *f == 'l' || *f == 'q' || *f == 'n');
    int is_unsigned = (*f == 'B' || *f == 'H' || *f == 'I' || *f == 'L' || *f == 'Q' || *f == 'N');
    if (!is_signed && !is_unsigned) return NULL;
    switch (view->itemsize) {
        case 1: return is_signed ? read_i8 : read_u8;
        case 2: return is_signed ? read_i16 : read_u16;
        case 4: return is_signed ? read_i32 : read_u32;
        case 8: return is_signed ? read_i64 : read_u64;
        default: return NULL;
    }
}

/* The tokens of ``obj``: a bytes object is native uint32 packed (how the gateway joins a
 * prompt's ids), read in place (a numpy array's buffer export costs more than hashing a
 * short prompt); anything else through the buffer protocol. Release with
 * PyBuffer_Release (a no-op for bytes: ``view->obj`` stays NULL). */
static int get_tokens(PyObject *obj, Py_buffer *view) {
    if (PyBytes_CheckExact(obj)) {
        Py_ssize_t len = PyBytes_GET_SIZE(obj);
        if (len % 4) {
            PyErr_Format(PyExc_ValueError,
                         "packed token ids must be a multiple of 4 bytes long, not %zd", len);
            return -1;
        }
        memset(view, 0, sizeof(*view));
        view->buf = PyBytes_AS_STRING(obj);
        view->len = len;
        view->itemsize = 4;
        view->format = (char *)"I";
        view->ndim = 1;
        view->readonly = 1;
        return 0;
    }
    return PyObject_GetBuffer(obj, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS);
}

static uint64_t block_content(const char *data, reader read, Py_ssize_t start, Py_ssize_t len) {
    uint64_t acc = 0;
    if (read == read_u32) { /* the common case: token ids as uint32, no call per token */
        const uint32_t *t = (const uint32_t *)data + start;
        for (Py_ssize_t k = 0; k < len; k++) acc += (uint64_t)t[k] * weights[k];
    } else {
        for (Py_ssize_t k = 0; k < len; k++) acc += read(data, start + k) * weights[k];
    }
    return mix(acc + (uint64_t)len * CH_M2);
}

PyDoc_STRVAR(block_hashes_doc,
"block_hashes(tokens, block_size, parent, partial) -> list[int]\n\n"
"Chained hashes of the full blocks of ``tokens`` (a 1-D buffer of integers, or bytes of\n"
"packed native uint32), the chain continuing from ``parent``; with ``partial``, then the\n"
"hash of the partial last block (if any), chained the same way.");

/* Arguments by position, no tuple or format string to parse (a capture record calls
   this and common_prefix once each). */
static PyObject *block_hashes(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "block_hashes takes 4 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *tokens = args[0], *parent_obj = args[2];
    Py_ssize_t block = PyNumber_AsSsize_t(args[1], PyExc_OverflowError);
    if (block == -1 && PyErr_Occurred()) return NULL;
    int partial = PyObject_IsTrue(args[3]);
    if (partial < 0) return NULL;
    if (block < 1 || block > CH_MAX_BLOCK) {
        PyErr_Format(PyExc_ValueError, "block_size must be 1..%d, not %zd", CH_MAX_BLOCK, block);
        return NULL;
    }
    uint64_t h = PyLong_AsUnsignedLongLong(parent_obj);
    if (h == (uint64_t)-1 && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (get_tokens(tokens, &view) < 0) return NULL;
    PyObject *out = NULL;
    reader read = reader_for(&view);
    if (read == NULL || view.ndim > 1) {
        PyErr_Format(PyExc_TypeError, "tokens must be a 1-D buffer of integers (format %s)",
                     view.format ? view.format : "B");
        goto done;
    }
    ensure_weights(block);
    Py_ssize_t n = view.itemsize ? view.len / view.itemsize : 0;
    Py_ssize_t full = n / block, tail = n - full * block;
    out = PyList_New(full + (partial && tail ? 1 : 0));
    if (out == NULL) goto done;
    const char *data = (const char *)view.buf;
    for (Py_ssize_t b = 0; b <= full; b++) {
        Py_ssize_t len = b < full ? block : tail;
        if (len == 0 || (b == full && !partial)) break;
        h = h * CH_P + block_content(data, read, b * block, len);
        PyObject *value = PyLong_FromUnsignedLongLong(h);
        if (value == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, b, value);
    }
done:
    PyBuffer_Release(&view);
    return out;
}

PyDoc_STRVAR(common_prefix_doc,
"common_prefix(a, b) -> int\n\n"
"How many leading items two 1-D buffers of the same item size have in common (bytes\n"
"compared: for token ids of one dtype, equal items); bytes are packed uint32 as in\n"
"block_hashes.");

static PyObject *common_prefix(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "common_prefix takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *a_obj = args[0], *b_obj = args[1];
    Py_buffer a, b;
    if (get_tokens(a_obj, &a) < 0) return NULL;
    if (get_tokens(b_obj, &b) < 0) {
        PyBuffer_Release(&a);
        return NULL;
    }
    PyObject *out = NULL;
    if (a.itemsize != b.itemsize || a.itemsize == 0) {
        PyErr_SetString(PyExc_TypeError, "common_prefix needs two buffers of one item size");
    } else {
        Py_ssize_t n = a.len < b.len ? a.len : b.len, i = 0;
        const unsigned char *x = a.buf, *y = b.buf;
        /* Whole runs first (one library memcmp per 1 KiB: prompts mostly share
           everything up to their last message), then 8 bytes, then bytes. */
        while (i + 1024 <= n && memcmp(x + i, y + i, 1024) == 0) i += 1024;
        while (i + 8 <= n && memcmp(x + i, y + i, 8) == 0) i += 8;
        while (i < n && x[i] == y[i]) i++;
        out = PyLong_FromSsize_t(i / a.itemsize);
    }
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    return out;
}

/* The keyed function of exported and captured traces (hashing.py: keyed_values): each
 * 64-bit hash, as 8 little-endian bytes, through keyed BLAKE2b with an 8-byte digest,
 * read little-endian. Written from RFC 7693; tests/trace/test_keyed.py checks it
 * against hashlib on random keys and values. The key's block is compressed once per
 * call, then each hash is one compression of its final block. */
static const uint64_t B2_IV[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL,
};
static const uint8_t B2_SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
};

static inline uint64_t rotr64(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }

#define B2_G(a, b, c, d, x, y)          \
    do {                                \
        v[a] = v[a] + v[b] + (x);       \
        v[d] = rotr64(v[d] ^ v[a], 32); \
        v[c] = v[c] + v[d];             \
        v[b] = rotr64(v[b] ^ v[c], 24); \
        v[a] = v[a] + v[b] + (y);       \
        v[d] = rotr64(v[d] ^ v[a], 16); \
        v[c] = v[c] + v[d];             \
        v[b] = rotr64(v[b] ^ v[c], 63); \
    } while (0)

/* One compression of block m (16 little-endian words) into h; t counts the bytes so
 * far, last marks the final block. */
static void b2_compress(uint64_t h[8], const uint64_t m[16], uint64_t t, int last) {
    uint64_t v[16];
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = B2_IV[i];
    }
    v[12] ^= t; /* the counter's high word stays 0: inputs are far below 2**64 bytes */
    if (last) v[14] = ~v[14];
    for (int r = 0; r < 12; r++) {
        const uint8_t *s = B2_SIGMA[r];
        B2_G(0, 4, 8, 12, m[s[0]], m[s[1]]);
        B2_G(1, 5, 9, 13, m[s[2]], m[s[3]]);
        B2_G(2, 6, 10, 14, m[s[4]], m[s[5]]);
        B2_G(3, 7, 11, 15, m[s[6]], m[s[7]]);
        B2_G(0, 5, 10, 15, m[s[8]], m[s[9]]);
        B2_G(1, 6, 11, 12, m[s[10]], m[s[11]]);
        B2_G(2, 7, 8, 13, m[s[12]], m[s[13]]);
        B2_G(3, 4, 9, 14, m[s[14]], m[s[15]]);
    }
    for (int i = 0; i < 8; i++) h[i] ^= v[i] ^ v[i + 8];
}

PyDoc_STRVAR(keyed_doc,
"keyed(hashes, key) -> list[int]\n\n"
"Each of ``hashes`` (a list of ints below 2**64) through keyed BLAKE2b (8-byte digest):\n"
"``int.from_bytes(blake2b(h.to_bytes(8, 'little'), digest_size=8, key=key).digest(), 'little')``.\n"
"``key`` is bytes, 1 to 64 long.");

static PyObject *keyed(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "keyed takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *hashes = args[0], *key = args[1];
    if (!PyList_Check(hashes) || !PyBytes_Check(key)) {
        PyErr_SetString(PyExc_TypeError, "keyed(hashes: list[int], key: bytes)");
        return NULL;
    }
    Py_ssize_t key_len = PyBytes_GET_SIZE(key);
    if (key_len < 1 || key_len > 64) {
        PyErr_Format(PyExc_ValueError, "a BLAKE2b key is 1 to 64 bytes, not %zd", key_len);
        return NULL;
    }
    /* The parameter block (digest 8 bytes, key length, fanout 1, depth 1), then the key's
     * block, zero-padded to 128 bytes. */
    uint64_t start[8], m[16];
    memcpy(start, B2_IV, sizeof(start));
    start[0] ^= 0x01010000ULL ^ ((uint64_t)key_len << 8) ^ 8ULL;
    uint8_t block[128] = {0};
    memcpy(block, PyBytes_AS_STRING(key), (size_t)key_len);
    for (int i = 0; i < 16; i++) {
        uint64_t w = 0;
        for (int k = 7; k >= 0; k--) w = (w << 8) | block[8 * i + k];
        m[i] = w;
    }
    b2_compress(start, m, 128, 0);
    Py_ssize_t n = PyList_GET_SIZE(hashes);
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    memset(m, 0, sizeof(m));
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t value = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(hashes, i));
        if (value == (uint64_t)-1 && PyErr_Occurred()) {
            Py_DECREF(out);
            return NULL;
        }
        uint64_t h[8];
        memcpy(h, start, sizeof(h));
        m[0] = value; /* 8 little-endian bytes are the word itself */
        b2_compress(h, m, 136, 1);
        PyObject *item = PyLong_FromUnsignedLongLong(h[0]); /* digest: h[0]'s 8 LE bytes */
        if (item == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, item);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"block_hashes", (PyCFunction)(void (*)(void))block_hashes, METH_FASTCALL, block_hashes_doc},
    {"common_prefix", (PyCFunction)(void (*)(void))common_prefix, METH_FASTCALL, common_prefix_doc},
    {"keyed", (PyCFunction)(void (*)(void))keyed, METH_FASTCALL, keyed_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "chainhash", "kvroute's chained block hash for one prompt, in C.",
    -1, methods,
};

PyMODINIT_FUNC PyInit_chainhash(void) { return PyModule_Create(&module); }
