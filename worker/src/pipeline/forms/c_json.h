/* Generated C's values as JSON (after c_cases.h): by the static type of what a function
 * returned, so that one macro renders every scalar, a string, a character and a boolean; a
 * pointer or a struct is written as what it is, not what it points to. */
static void codegen_json_str(struct codegen_buf *b, const char *s) { codegen_str(b, s); }
static void codegen_json_char(struct codegen_buf *b, char c) {
    char s[2] = {c, '\0'};
    codegen_str(b, s);
}
static void codegen_json_bool(struct codegen_buf *b, _Bool v) { codegen_puts(b, v ? "true" : "false"); }
static void codegen_json_double(struct codegen_buf *b, double d) { codegen_double(b, d); }
static void codegen_json_ldouble(struct codegen_buf *b, long double d) { codegen_double(b, (double)d); }
static void codegen_json_llong(struct codegen_buf *b, long long v) { codegen_llong(b, v); }
static void codegen_json_ullong(struct codegen_buf *b, unsigned long long v) { codegen_ullong(b, v); }
static void codegen_json_pointer(struct codegen_buf *b, const void *p) {
    codegen_str(b, p ? "<pointer>" : NULL);
}
static void codegen_json_other(struct codegen_buf *b, ...) { codegen_str(b, "<unprintable>"); }

#define CODEGEN_JSON(b, v)                                                                      \
    _Generic((v),                                                                               \
        char *: codegen_json_str, const char *: codegen_json_str, char: codegen_json_char,     \
        _Bool: codegen_json_bool, float: codegen_json_double, double: codegen_json_double,      \
        long double: codegen_json_ldouble, signed char: codegen_json_llong,                    \
        short: codegen_json_llong, int: codegen_json_llong, long: codegen_json_llong,          \
        long long: codegen_json_llong, unsigned char: codegen_json_ullong,                     \
        unsigned short: codegen_json_ullong, unsigned int: codegen_json_ullong,                \
        unsigned long: codegen_json_ullong, unsigned long long: codegen_json_ullong,           \
        void *: codegen_json_pointer, const void *: codegen_json_pointer,                      \
        int *: codegen_json_pointer, const int *: codegen_json_pointer,                        \
        long *: codegen_json_pointer, double *: codegen_json_pointer,                          \
        default: codegen_json_other)(b, v)
