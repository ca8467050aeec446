/* The value type of the Jinja interpreter: none, bool, int, float, string,
 * list, dict, macro, namespace, and the internal kinds (undefined, a loop
 * object, a bound method, a builtin function). Every value of one rendering
 * lives in an arena freed at once when the rendering ends, so values are
 * plain structs shared freely; a string may point into the caller's data
 * (the parsed record) and carries the tag of the message it came from, so
 * that the interpreter can tell where assistant content lands in the output. */
#ifndef DF_TEXT_JINJA_VALUE_H
#define DF_TEXT_JINJA_VALUE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef enum {
    JV_UNDEF,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_DICT,
    JV_NS,     /* namespace(): a dict whose attributes may be set */
    JV_MACRO,
    JV_LOOP,   /* the loop variable of a for */
    JV_METHOD, /* obj.method, not yet called */
    JV_BUILTIN /* a global function: range, namespace, raise_exception, ... */
} JvType;

typedef struct JList JList;
typedef struct JDict JDict;
typedef struct JLoop JLoop;
typedef struct JMethod JMethod;
struct JMacro;

typedef struct JVal {
    uint8_t type;
    int32_t tag; /* strings: the tag of the data they came from, -1 for none */
    union {
        int b;
        int64_t i;
        double f;
        struct {
            const char *p;
            size_t n;
        } s;
        JList *l;
        JDict *d;
        JLoop *loop;
        JMethod *m;
        const struct JMacro *macro;
        int builtin;
    } u;
} JVal;

struct JList {
    JVal *v;
    size_t n, cap;
    int tuple; /* printed as (a, b) */
};

struct JDict {
    JVal *k, *v; /* insertion order, as Python's dict */
    size_t n, cap;
};

struct JLoop {
    const JList *items;
    size_t index; /* 0-based */
    int depth;
};

struct JMethod {
    JVal self;
    const char *name;
    size_t name_len;
};

/* The arena of one rendering; bounded by max_bytes. */
typedef struct JArena {
    struct JArenaBlock *head;
    size_t used, max_bytes;
    int over; /* set once max_bytes was exceeded */
} JArena;

void *jv_alloc(JArena *a, size_t n); /* never NULL: past max_bytes it still allocates and sets a->over */
void jv_arena_free(JArena *a);

static inline JVal jv_undef(void) { return (JVal){.type = JV_UNDEF, .tag = -1}; }
static inline JVal jv_none(void) { return (JVal){.type = JV_NONE, .tag = -1}; }
static inline JVal jv_bool(int b) { return (JVal){.type = JV_BOOL, .tag = -1, .u.b = !!b}; }
static inline JVal jv_int(int64_t i) { return (JVal){.type = JV_INT, .tag = -1, .u.i = i}; }
static inline JVal jv_float(double f) { return (JVal){.type = JV_FLOAT, .tag = -1, .u.f = f}; }
static inline JVal jv_str(const char *p, size_t n, int tag) {
    return (JVal){.type = JV_STR, .tag = tag, .u.s = {p, n}};
}
JVal jv_str_copy(JArena *a, const char *p, size_t n);
JVal jv_cstr(const char *s); /* a static string */
JVal jv_list(JArena *a);
JVal jv_tuple(JArena *a);
JVal jv_dict(JArena *a);
void jv_list_push(JArena *a, JList *l, JVal v);
void jv_dict_set(JArena *a, JDict *d, JVal k, JVal v);
/* The value under key, or NULL. */
const JVal *jv_dict_get(const JDict *d, JVal k);
const JVal *jv_dict_getn(const JDict *d, const char *key, size_t n);

int jv_is_str(JVal v, const char *s);
int jv_truthy(JVal v);
int jv_equal(JVal a, JVal b);
/* Python's ordering: numbers with numbers, strings with strings, lists
 * elementwise; -2 when the two cannot be ordered. */
int jv_compare(JVal a, JVal b);
const char *jv_type_name(JVal v);

/* Python's str() and repr() appended to a growable buffer. */
typedef struct JBuf {
    char *p;
    size_t n, cap;
} JBuf;
void jb_add(JBuf *b, const char *s, size_t n);
static inline void jb_adds(JBuf *b, const char *s);
void jv_to_str(JBuf *b, JVal v);
void jv_repr(JBuf *b, JVal v);
void jv_float_repr(JBuf *b, double f); /* Python's repr of a float: shortest round-trip */
/* str(v) as a string value in the arena (v itself if a string). */
JVal jv_stringify(JArena *a, JVal v);

/* Offset of needle in hay at or after `from`, or -1. */
long jv_find(const char *hay, size_t hn, const char *needle, size_t nn, size_t from);

/* UTF-8 helpers for Python's code-point view of strings. */
size_t jv_utf8_len(const char *p, size_t n);
size_t jv_utf8_offset(const char *p, size_t n, size_t cp); /* byte offset of code point cp (clamped) */
int jv_is_space_at(const char *p, size_t n, size_t *width); /* Python's str.isspace for the char at p */

static inline void jb_adds(JBuf *b, const char *s) {
    size_t n = 0;
    while (s[n]) n++;
    jb_add(b, s, n);
}

#endif
