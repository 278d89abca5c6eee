/* src/runtime/env.h — the environment variables the library reads, parsed whole: a number is all
   digits and in range, a string fits its buffer, a flag is 0 or 1. The manual's "Environment variables"
   table lists each one, with what a bad value does. */
#include <errno.h>
#include <limits.h>

/* s as a whole decimal number in [lo, hi] (no sign other than a leading '-', no spaces, no suffix,
   no exponent): 0 and *out set, else -1 */
GDL__OSFN int gdl__parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    long x;
    if (!s || !((s[0] >= '0' && s[0] <= '9') || (s[0] == '-' && s[1] >= '0' && s[1] <= '9'))) return -1;
    errno = 0;
    x = strtol(s, &end, 10);
    if (*end || errno == ERANGE || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

/* The variable `name` as a whole number in [lo, hi]: 1 and *out set; 0 when unset or empty (*out = def);
   -1 + an error naming op, the variable, its value and the range. */
GDL__OSFN int gdl__env_long(const char *op, const char *name, long lo, long hi, long def, long *out) {
    const char *v = getenv(name);
    *out = def;
    if (!v || !v[0]) return 0;
    if (gdl__parse_long(v, lo, hi, out) < 0) {
        *out = def;
        gdl__set_error("%s: %s='%.64s%s' is not a whole number in [%ld, %ld]", op, name, v,
                       strlen(v) > 64 ? "..." : "", lo, hi);
        return -1;
    }
    return 1;
}

/* The variable `name` when it has at most max bytes: 1 and *out its value; 0 unset or empty (*out = "");
   -1 + an error naming op, the variable, its length and the limit (never a silent truncation). */
GDL__OSFN int gdl__env_str(const char *op, const char *name, size_t max, const char **out) {
    const char *v = getenv(name);
    size_t n = v ? strlen(v) : 0;
    *out = "";
    if (!n) return 0;
    if (n > max) {
        gdl__set_error("%s: %s is %lu bytes long (it starts '%.32s...'): at most %lu", op, name,
                       (unsigned long)n, v, (unsigned long)max);
        return -1;
    }
    *out = v;
    return 1;
}

/* One line on stderr for a variable read where no call can fail (a thread count at first use, a
   notice's switch): what was wrong and what is used instead. */
GDL__OSFN void gdl__env_warn(const char *name, const char *value, const char *allowed, const char *instead) {
    fprintf(stderr, "gpudl: warning: ignoring %s='%.64s%s': not %s; using %s\n", name, value,
            strlen(value) > 64 ? "..." : "", allowed, instead);
}

/* A switch: unset, empty or "0": 0; "1": 1; anything else: a warning line and def. */
GDL__OSFN int gdl__env_flag(const char *name, int def) {
    const char *v = getenv(name);
    if (!v || !v[0] || !strcmp(v, "0")) return 0;
    if (!strcmp(v, "1")) return 1;
    gdl__env_warn(name, v, "0 or 1", def ? "1" : "0");
    return def;
}
