// Generated C++'s values as JSON (after c_cases.h), by overloads on what a function returned:
// scalars, strings, the standard containers (sets as sorted arrays, map keys as strings),
// pairs, tuples and optionals; a pointer as what it is. And what a function threw, by name:
// the exception's class (demangled, with and without its namespace), then each standard base
// class it derives from, then `std::exception`. A type of the program's own is written as its
// name (`render`).
#include <algorithm>
#include <array>
#include <cxxabi.h>
#include <deque>
#include <exception>
#include <list>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace codegen {
void json(codegen_buf &b, const std::string &s);
void json(codegen_buf &b, const char *s);
void json(codegen_buf &b, char *s);
void json(codegen_buf &b, char c);
void json(codegen_buf &b, bool v);
template <class T> std::enable_if_t<std::is_integral_v<T>> json(codegen_buf &b, T v);
template <class T> std::enable_if_t<std::is_floating_point_v<T>> json(codegen_buf &b, T v);
template <class T> void json(codegen_buf &b, const T *p);
template <class T, class A> void json(codegen_buf &b, const std::vector<T, A> &v);
template <class T, std::size_t N> void json(codegen_buf &b, const std::array<T, N> &v);
template <class T, class A> void json(codegen_buf &b, const std::deque<T, A> &v);
template <class T, class A> void json(codegen_buf &b, const std::list<T, A> &v);
template <class K, class V, class C, class A> void json(codegen_buf &b, const std::map<K, V, C, A> &m);
template <class K, class V, class H, class E, class A>
void json(codegen_buf &b, const std::unordered_map<K, V, H, E, A> &m);
template <class T, class C, class A> void json(codegen_buf &b, const std::set<T, C, A> &s);
template <class T, class H, class E, class A>
void json(codegen_buf &b, const std::unordered_set<T, H, E, A> &s);
template <class A, class B> void json(codegen_buf &b, const std::pair<A, B> &p);
template <class... T> void json(codegen_buf &b, const std::tuple<T...> &t);
template <class T> void json(codegen_buf &b, const std::optional<T> &o);

inline void json(codegen_buf &b, const std::string &s) { codegen_str(&b, s.c_str()); }
inline void json(codegen_buf &b, const char *s) { codegen_str(&b, s); }
inline void json(codegen_buf &b, char *s) { codegen_str(&b, s); }
inline void json(codegen_buf &b, char c) {
    char s[2] = {c, '\0'};
    codegen_str(&b, s);
}
inline void json(codegen_buf &b, bool v) { codegen_puts(&b, v ? "true" : "false"); }
template <class T> std::enable_if_t<std::is_integral_v<T>> json(codegen_buf &b, T v) {
    if constexpr (std::is_signed_v<T>) codegen_llong(&b, (long long)v);
    else codegen_ullong(&b, (unsigned long long)v);
}
template <class T> std::enable_if_t<std::is_floating_point_v<T>> json(codegen_buf &b, T v) {
    codegen_double(&b, (double)v);
}
template <class T> void json(codegen_buf &b, const T *p) { codegen_str(&b, p ? "<pointer>" : nullptr); }

template <class It> void items(codegen_buf &b, It first, It last) {
    codegen_puts(&b, "[");
    for (It i = first; i != last; ++i) {
        if (i != first) codegen_puts(&b, ",");
        json(b, *i);
    }
    codegen_puts(&b, "]");
}

// An unordered set's items in order: numbers by value, the rest by their JSON.
template <class It> void sorted(codegen_buf &b, It first, It last) {
    std::vector<std::string> rendered;
    for (It i = first; i != last; ++i) {
        codegen_buf one = {0};
        json(one, *i);
        rendered.emplace_back(one.data ? one.data : "");
        free(one.data);
    }
    std::sort(rendered.begin(), rendered.end(), [](const std::string &x, const std::string &y) {
        char *ex = nullptr, *ey = nullptr;
        double dx = strtod(x.c_str(), &ex), dy = strtod(y.c_str(), &ey);
        if (!x.empty() && !y.empty() && *ex == '\0' && *ey == '\0') return dx < dy;
        return x < y;
    });
    codegen_puts(&b, "[");
    for (std::size_t i = 0; i < rendered.size(); i++) {
        if (i) codegen_puts(&b, ",");
        codegen_puts(&b, rendered[i].c_str());
    }
    codegen_puts(&b, "]");
}

inline std::string key(const std::string &k) { return k; }
inline std::string key(const char *k) { return k ? k : ""; }
inline std::string key(char k) { return std::string(1, k); }
inline std::string key(bool k) { return k ? "true" : "false"; }
template <class T> std::enable_if_t<std::is_arithmetic_v<T>, std::string> key(T k) {
    codegen_buf one = {0};
    json(one, k);
    std::string out = one.data ? one.data : "";
    free(one.data);
    return out;
}

template <class M> void pairs(codegen_buf &b, const M &m) {
    codegen_puts(&b, "{");
    bool first = true;
    for (const auto &kv : m) {
        if (!first) codegen_puts(&b, ",");
        first = false;
        codegen_str(&b, key(kv.first).c_str());
        codegen_puts(&b, ":");
        json(b, kv.second);
    }
    codegen_puts(&b, "}");
}

template <class T, class A> void json(codegen_buf &b, const std::vector<T, A> &v) {
    codegen_puts(&b, "[");
    for (std::size_t i = 0; i < v.size(); i++) {
        if (i) codegen_puts(&b, ",");
        // A vector<bool>'s element is a bool, not a reference to one.
        json(b, static_cast<const T &>(v[i]));
    }
    codegen_puts(&b, "]");
}
template <class T, std::size_t N> void json(codegen_buf &b, const std::array<T, N> &v) { items(b, v.begin(), v.end()); }
template <class T, class A> void json(codegen_buf &b, const std::deque<T, A> &v) { items(b, v.begin(), v.end()); }
template <class T, class A> void json(codegen_buf &b, const std::list<T, A> &v) { items(b, v.begin(), v.end()); }
template <class K, class V, class C, class A> void json(codegen_buf &b, const std::map<K, V, C, A> &m) { pairs(b, m); }
template <class K, class V, class H, class E, class A>
void json(codegen_buf &b, const std::unordered_map<K, V, H, E, A> &m) { pairs(b, m); }
template <class T, class C, class A> void json(codegen_buf &b, const std::set<T, C, A> &s) { sorted(b, s.begin(), s.end()); }
template <class T, class H, class E, class A>
void json(codegen_buf &b, const std::unordered_set<T, H, E, A> &s) { sorted(b, s.begin(), s.end()); }
template <class A, class B> void json(codegen_buf &b, const std::pair<A, B> &p) {
    codegen_puts(&b, "[");
    json(b, p.first);
    codegen_puts(&b, ",");
    json(b, p.second);
    codegen_puts(&b, "]");
}
template <class... T> void json(codegen_buf &b, const std::tuple<T...> &t) {
    codegen_puts(&b, "[");
    std::size_t i = 0;
    std::apply([&](const auto &...x) { ((codegen_puts(&b, i++ ? "," : ""), json(b, x)), ...); }, t);
    codegen_puts(&b, "]");
}
template <class T> void json(codegen_buf &b, const std::optional<T> &o) {
    if (o) json(b, *o);
    else codegen_puts(&b, "null");
}

// Whether the overloads above write a `T` (a type of the program's own has none).
template <class T, class = void> struct has_json : std::false_type {};
template <class T>
struct has_json<T, std::void_t<decltype(json(std::declval<codegen_buf &>(), std::declval<const T &>()))>>
    : std::true_type {};

inline std::string demangled(const char *name) {
    int status = 0;
    char *plain = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    std::string out = status == 0 && plain ? plain : name;
    free(plain);
    return out;
}

// A returned value: as JSON when the overloads write its type, else `"<its type>"` (it
// compiles, and the verdict says what came back).
template <class T> void render(codegen_buf &b, const T &v) {
    if constexpr (has_json<T>::value) {
        json(b, v);
    } else {
        codegen_str(&b, ("<" + demangled(typeid(T).name()) + ">").c_str());
    }
}

// What a case threw, by every name it answers to.
inline void raised(codegen_buf &b, const std::exception &e) {
    std::string full = demangled(typeid(e).name());
    std::vector<std::string> names{full};
    auto colons = full.rfind("::");
    if (colons != std::string::npos) names.push_back(full.substr(colons + 2));
    auto base = [&](bool is, const char *name) {
        if (is && std::find(names.begin(), names.end(), std::string("std::") + name) == names.end()) {
            names.push_back(std::string("std::") + name);
            names.push_back(name);
        }
    };
    base(dynamic_cast<const std::invalid_argument *>(&e), "invalid_argument");
    base(dynamic_cast<const std::domain_error *>(&e), "domain_error");
    base(dynamic_cast<const std::length_error *>(&e), "length_error");
    base(dynamic_cast<const std::out_of_range *>(&e), "out_of_range");
    base(dynamic_cast<const std::logic_error *>(&e), "logic_error");
    base(dynamic_cast<const std::range_error *>(&e), "range_error");
    base(dynamic_cast<const std::overflow_error *>(&e), "overflow_error");
    base(dynamic_cast<const std::underflow_error *>(&e), "underflow_error");
    base(dynamic_cast<const std::runtime_error *>(&e), "runtime_error");
    base(true, "exception");
    std::vector<const char *> pointers;
    for (const auto &n : names) pointers.push_back(n.c_str());
    codegen_raised(&b, pointers.data(), (int)pointers.size(), e.what());
}
}  // namespace codegen
