/* The chunk memo of kvroute/trace/pretokenize.py's AsciiWordEncoder, in C.
 *
 * AsciiWordEncoder.encode_packed cuts plain-ASCII text at its single spaces into
 * chunks whose words do not depend on their neighbours, looks each chunk up in a memo
 * (the first chunk in ``heads``, the others, keyed without their space, in
 * ``chunks``) and joins the packed ids. In Python that is a dozen calls for a short
 * message; this does the same in one, and calls back ``encode_words`` (the Python
 * split and BPE) only for a chunk it has not seen. The same ids, and the same memo
 * entries but for when the bound clears it:
 * tests/trace/test_pretokenize.py runs both on the same texts.
 *
 * encode_words is AsciiWordEncoder._encode_words for the two GPT-2 splits (GPT-2's
 * regex, and the same after every digit is isolated: llama.cpp's smollm and starcoder
 * pre-tokenizers), written out as a scanner of the ASCII regexes of pretokenize.py
 * (GPT2_REGEX through ascii_regex, and _GPT2_ISOLATED_DIGITS). The tests compare its
 * words with those regexes' findall on random texts of the split's corner cases.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define STACK_PARTS 64

static inline int is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* AsciiWordEncoder.accepts: printable ASCII plus tab, line feed, carriage return. */
static int accepts(const unsigned char *s, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if ((c < 0x20 || c > 0x7e) && c != '\t' && c != '\n' && c != '\r') return 0;
    }
    return 1;
}

/* pretokenize._space_by_space: some space has whitespace on either side. */
static int space_by_space(const unsigned char *s, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] != ' ') continue;
        if ((i > 0 && is_space(s[i - 1])) || (i + 1 < n && is_space(s[i + 1]))) return 1;
    }
    return 0;
}

static PyObject *call_encode(PyObject *encode_words, PyObject *text) {
    PyObject *out = PyObject_CallOneArg(encode_words, text);
    if (out != NULL && !PyBytes_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "encode_words must return bytes");
        Py_CLEAR(out);
    }
    return out;
}

/* The ``n`` bytes objects of ``parts`` (``total`` bytes in all) joined. */
static PyObject *join_bytes(PyObject *const *parts, Py_ssize_t n, Py_ssize_t total) {
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) return NULL;
    char *at = PyBytes_AS_STRING(out);
    for (Py_ssize_t k = 0; k < n; k++) {
        memcpy(at, PyBytes_AS_STRING(parts[k]), PyBytes_GET_SIZE(parts[k]));
        at += PyBytes_GET_SIZE(parts[k]);
    }
    return out;
}

PyDoc_STRVAR(encode_chunks_doc,
"encode_chunks(heads, chunks, encode_words, max_words, text) -> bytes | None\n\n"
"AsciiWordEncoder.encode_packed: None when ``text`` is not plain ASCII, else its packed\n"
"ids, chunk by chunk through the memos ``heads`` and ``chunks`` (both cleared when they\n"
"would pass ``max_words``), ``encode_words`` encoding what they lack.");

/* Arguments by position without a tuple or a format string to parse (this runs once per
   new message: PyArg_ParseTuple cost a tenth of the call). The text comes last, so
   that functools.partial can bind the rest. */
static int dict_arg(PyObject *arg, const char *func, const char *name) {
    if (PyDict_Check(arg)) return 1;
    PyErr_Format(PyExc_TypeError, "%s: %s must be a dict, not %.100s", func, name,
                 Py_TYPE(arg)->tp_name);
    return 0;
}

static int str_arg(PyObject *arg, const char *func) {
    if (PyUnicode_Check(arg)) return 1;
    PyErr_Format(PyExc_TypeError, "%s: text must be a str, not %.100s", func, Py_TYPE(arg)->tp_name);
    return 0;
}

static PyObject *encode_chunks(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "encode_chunks takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *heads = args[0], *chunks = args[1], *encode_words = args[2], *text = args[4];
    if (!dict_arg(heads, "encode_chunks", "heads") || !dict_arg(chunks, "encode_chunks", "chunks")
        || !str_arg(text, "encode_chunks"))
        return NULL;
    Py_ssize_t max_words = PyNumber_AsSsize_t(args[3], PyExc_OverflowError);
    if (max_words == -1 && PyErr_Occurred()) return NULL;
    if (!PyUnicode_IS_ASCII(text)) Py_RETURN_NONE;
    const unsigned char *s = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (!accepts(s, n)) Py_RETURN_NONE;
    Py_ssize_t num_parts = 1;
    for (Py_ssize_t i = 0; i < n; i++) num_parts += s[i] == ' ';
    if (num_parts < 3 || s[0] == ' ' || s[n - 1] == ' ' || space_by_space(s, n))
        return call_encode(encode_words, text);

    PyObject *stack[STACK_PARTS];
    PyObject **found = num_parts <= STACK_PARTS ? stack : PyMem_Malloc(num_parts * sizeof(PyObject *));
    if (found == NULL) return PyErr_NoMemory();
    Py_ssize_t num_found = 0, total = 0, start = 0;
    int cleared = 0;
    PyObject *out = NULL;
    for (Py_ssize_t k = 0; k < num_parts; k++) {
        Py_ssize_t end = start;
        while (end < n && s[end] != ' ') end++;
        PyObject *memo = k == 0 ? heads : chunks;
        PyObject *part = PyUnicode_Substring(text, start, end);
        if (part == NULL) goto done;
        PyObject *ids = PyDict_GetItemWithError(memo, part);
        if (ids != NULL) {
            Py_INCREF(ids);
        } else if (!PyErr_Occurred()) {
            if (!cleared) { /* a bound, not an LRU, checked once per text as in Python */
                cleared = 1;
                if (PyDict_GET_SIZE(chunks) + num_parts > max_words || PyDict_GET_SIZE(heads) >= max_words) {
                    PyDict_Clear(chunks);
                    PyDict_Clear(heads);
                }
            }
            /* A later chunk is encoded with the space before it: text[start - 1:end]. */
            PyObject *chunk = k == 0 ? (Py_INCREF(part), part) : PyUnicode_Substring(text, start - 1, end);
            if (chunk != NULL) {
                ids = call_encode(encode_words, chunk);
                Py_DECREF(chunk);
            }
            if (ids != NULL && PyDict_SetItem(memo, part, ids) < 0) Py_CLEAR(ids);
        }
        Py_DECREF(part);
        if (ids == NULL) goto done;
        found[num_found++] = ids;
        total += PyBytes_GET_SIZE(ids);
        start = end + 1;
    }
    out = join_bytes(found, num_found, total);
done:
    for (Py_ssize_t k = 0; k < num_found; k++) Py_DECREF(found[k]);
    if (found != stack) PyMem_Free(found);
    return out;
}

static inline int is_letter(unsigned char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
static inline int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static inline int is_other(unsigned char c) { return !is_space(c) && !is_letter(c) && !is_digit(c); }

/* The length of the contraction ('s 't 're 've 'm 'll 'd) at s[i], or 0. */
static Py_ssize_t contraction(const unsigned char *s, Py_ssize_t i, Py_ssize_t n) {
    if (s[i] != '\'' || i + 1 >= n) return 0;
    unsigned char a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* The length of the word at s[i] (i < n) under GPT-2's split, or with every digit a
 * word of its own (``isolated``): the first alternative of the regex that matches. */
static Py_ssize_t word_at(const unsigned char *s, Py_ssize_t i, Py_ssize_t n, int isolated) {
    unsigned char c = s[i];
    if (isolated && is_digit(c)) return 1;                    /* [0-9] */
    Py_ssize_t k = contraction(s, i, n);                      /* 's|'t|... */
    if (k) return k;
    Py_ssize_t j = i + (c == ' ' && i + 1 < n && !is_space(s[i + 1]));  /* " ?" */
    if (j < n && is_letter(s[j])) {                           /* " ?[A-Za-z]+" */
        while (j < n && is_letter(s[j])) j++;
        return j - i;
    }
    if (!isolated && j < n && is_digit(s[j])) {               /* " ?[0-9]+" */
        while (j < n && is_digit(s[j])) j++;
        return j - i;
    }
    if (j < n && is_other(s[j]) && !(isolated && is_digit(s[j]))) {  /* " ?[^\s A-Za-z0-9]+" */
        while (j < n && is_other(s[j])) j++;
        return j - i;
    }
    /* Whitespace: the run, less its last character when what follows the run is a
     * character the lookahead refuses (GPT-2: any non-space; isolated: a non-space
     * non-digit); a run of one then matches alone (the plain "\s+"). */
    Py_ssize_t end = i;
    while (end < n && is_space(s[end])) end++;
    if (end == i) return 1;  /* not reached: every ASCII character is in one class */
    if (end == n || (isolated && is_digit(s[end]))) return end - i;
    return end - i > 1 ? end - i - 1 : 1;
}

PyDoc_STRVAR(encode_words_doc,
"encode_words(memo, bpe, max_words, isolated_digits, text) -> bytes\n\n"
"AsciiWordEncoder._encode_words for GPT-2's split (with every digit a word of its own\n"
"when ``isolated_digits``): the packed ids of ``text``'s words, each from ``memo`` or\n"
"from ``bpe(word)`` (then remembered; ``memo`` is cleared first when it would pass\n"
"``max_words``).");

static PyObject *encode_words(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "encode_words takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *memo = args[0], *bpe = args[1], *text = args[4];
    if (!dict_arg(memo, "encode_words", "memo") || !str_arg(text, "encode_words")) return NULL;
    Py_ssize_t max_words = PyNumber_AsSsize_t(args[2], PyExc_OverflowError);
    if (max_words == -1 && PyErr_Occurred()) return NULL;
    int isolated = PyObject_IsTrue(args[3]);
    if (isolated < 0) return NULL;
    if (!PyUnicode_IS_ASCII(text)) {
        PyErr_SetString(PyExc_ValueError, "encode_words takes ASCII text");
        return NULL;
    }
    const unsigned char *s = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    Py_ssize_t bounds_stack[STACK_PARTS + 1];
    PyObject *stack[STACK_PARTS];
    Py_ssize_t num_words = 0;
    for (Py_ssize_t i = 0; i < n; i += word_at(s, i, n, isolated)) num_words++;
    int big = num_words > STACK_PARTS;
    Py_ssize_t *bounds = big ? PyMem_Malloc((num_words + 1) * sizeof(Py_ssize_t)) : bounds_stack;
    PyObject **found = big ? PyMem_Malloc(num_words * sizeof(PyObject *)) : stack;
    PyObject *out = NULL;
    Py_ssize_t num_found = 0, total = 0;
    if (bounds == NULL || found == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t w = 0;
    for (Py_ssize_t i = 0; i < n; i += word_at(s, i, n, isolated)) bounds[w++] = i;
    bounds[w] = n;
    int checked = 0;
    for (Py_ssize_t k = 0; k < num_words; k++) {
        PyObject *word = PyUnicode_Substring(text, bounds[k], bounds[k + 1]);
        if (word == NULL) goto done;
        PyObject *ids = PyDict_GetItemWithError(memo, word);
        if (ids != NULL) {
            Py_INCREF(ids);
        } else if (!PyErr_Occurred()) {
            if (!checked) { /* a bound, not an LRU: words recur, the memo refills */
                checked = 1;
                if (PyDict_GET_SIZE(memo) + num_words > max_words) PyDict_Clear(memo);
            }
            ids = call_encode(bpe, word);
            if (ids != NULL && PyDict_SetItem(memo, word, ids) < 0) Py_CLEAR(ids);
        }
        Py_DECREF(word);
        if (ids == NULL) goto done;
        found[num_found++] = ids;
        total += PyBytes_GET_SIZE(ids);
    }
    out = join_bytes(found, num_found, total);
done:
    for (Py_ssize_t k = 0; k < num_found; k++) Py_DECREF(found[k]);
    if (big) {
        PyMem_Free(bounds);
        PyMem_Free(found);
    }
    return out;
}

PyDoc_STRVAR(split_words_doc,
"split_words(text, isolated_digits) -> list[str]\n\n"
"The words encode_words cuts ``text`` (ASCII) into: for the tests.");

static PyObject *split_words(PyObject *self, PyObject *args) {
    PyObject *text;
    int isolated;
    if (!PyArg_ParseTuple(args, "Up", &text, &isolated)) return NULL;
    if (!PyUnicode_IS_ASCII(text)) {
        PyErr_SetString(PyExc_ValueError, "split_words takes ASCII text");
        return NULL;
    }
    const unsigned char *s = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    PyObject *out = PyList_New(0);
    for (Py_ssize_t i = 0; out != NULL && i < n;) {
        Py_ssize_t len = word_at(s, i, n, isolated);
        PyObject *word = PyUnicode_Substring(text, i, i + len);
        if (word == NULL || PyList_Append(out, word) < 0) Py_CLEAR(out);
        Py_XDECREF(word);
        i += len;
    }
    return out;
}

static PyMethodDef methods[] = {
    {"encode_chunks", (PyCFunction)(void (*)(void))encode_chunks, METH_FASTCALL, encode_chunks_doc},
    {"encode_words", (PyCFunction)(void (*)(void))encode_words, METH_FASTCALL, encode_words_doc},
    {"split_words", split_words, METH_VARARGS, split_words_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "asciiwords", "AsciiWordEncoder's chunk memo, in C.", -1, methods,
};

PyMODINIT_FUNC PyInit_asciiwords(void) { return PyModule_Create(&module); }
