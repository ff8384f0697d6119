// The test class of generated Java, appended to the program (one source file: the image's
// documented test form), rendered by worker/src/pipeline/forms/java.rs, which adds the report's
// path, the nonce and `cases()`: one `run` per case, its inputs decoded from JSON into the
// parameters' own types by Gson (on the image's class path), `Solution.name` called with them.
//
// Each case runs in a thread of its own under its timeout; what it returned (as plain JSON:
// NaN and infinities as strings), what it threw (its class and every superclass, by simple
// name) or the timeout is written as one JSON line to the report file, which the worker reads
// back and judges (forms/judge.rs). It extends Solution, so that the types the module declares
// (records, nested classes) are in scope by their simple names. A case that never ends leaves
// its (daemon) thread running; the process exits after the last case. What the functions print
// goes nowhere.
class CodegenCases extends Solution {
    // Sets are written as sorted arrays (numbers by value, the rest by their JSON), as the other
    // languages write them: a HashSet's order is not the function's.
    static final com.google.gson.Gson GSON = new com.google.gson.GsonBuilder()
            .serializeNulls().serializeSpecialFloatingPointValues().disableHtmlEscaping()
            .registerTypeHierarchyAdapter(java.util.Set.class,
                    (com.google.gson.JsonSerializer<java.util.Set<?>>) (set, type, context) -> {
                        java.util.List<com.google.gson.JsonElement> items = new java.util.ArrayList<>();
                        for (Object item : set) items.add(context.serialize(item));
                        items.sort(CodegenCases::order);
                        com.google.gson.JsonArray out = new com.google.gson.JsonArray();
                        items.forEach(out::add);
                        return out;
                    })
            .create();

    static int order(com.google.gson.JsonElement a, com.google.gson.JsonElement b) {
        if (a.isJsonPrimitive() && b.isJsonPrimitive() && a.getAsJsonPrimitive().isNumber()
                && b.getAsJsonPrimitive().isNumber()) {
            return Double.compare(a.getAsDouble(), b.getAsDouble());
        }
        return a.toString().compareTo(b.toString());
    }
    static java.io.PrintStream report;

    interface Call {
        Object call() throws Throwable;
    }

    static final class CodegenInputError extends RuntimeException {
        CodegenInputError(String message) {
            super(message);
        }
    }

    static <T> T decode(String name, String json, java.lang.reflect.Type type) {
        try {
            return GSON.fromJson(json, type);
        } catch (RuntimeException e) {
            throw new CodegenInputError("input " + name + " does not fit its type: " + e.getMessage());
        }
    }

    /** The value as plain JSON: what JSON cannot hold (NaN, infinities) as strings. */
    static com.google.gson.JsonElement plain(com.google.gson.JsonElement e, int depth) {
        if (depth > 64) return com.google.gson.JsonNull.INSTANCE;
        if (e.isJsonArray()) {
            com.google.gson.JsonArray out = new com.google.gson.JsonArray();
            for (com.google.gson.JsonElement x : e.getAsJsonArray()) out.add(plain(x, depth + 1));
            return out;
        }
        if (e.isJsonObject()) {
            com.google.gson.JsonObject out = new com.google.gson.JsonObject();
            for (java.util.Map.Entry<String, com.google.gson.JsonElement> x : e.getAsJsonObject().entrySet())
                out.add(x.getKey(), plain(x.getValue(), depth + 1));
            return out;
        }
        if (e.isJsonPrimitive() && e.getAsJsonPrimitive().isNumber()) {
            double d = e.getAsDouble();
            if (Double.isNaN(d) || Double.isInfinite(d)) return new com.google.gson.JsonPrimitive(String.valueOf(d));
        }
        return e;
    }

    static void run(int function, int index, long timeoutMs, Call call) {
        final Object[] value = new Object[1];
        final Throwable[] thrown = new Throwable[1];
        // A deep stack of its own: recursion a solution may use is not cut short by a thread's.
        Thread thread = new Thread(null, () -> {
            try {
                value[0] = call.call();
            } catch (Throwable e) {
                thrown[0] = e;
            }
        }, "case", 256L << 20);
        thread.setDaemon(true);
        long started = System.nanoTime();
        thread.start();
        try {
            thread.join(timeoutMs);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        com.google.gson.JsonObject line = new com.google.gson.JsonObject();
        line.addProperty("function", function);
        line.addProperty("case", index);
        line.addProperty("ms", (System.nanoTime() - started) / 1e6);
        if (thread.isAlive()) {
            line.addProperty("timeout", true);
        } else if (thrown[0] != null) {
            com.google.gson.JsonArray names = new com.google.gson.JsonArray();
            if (thrown[0] instanceof CodegenInputError) {
                names.add("CodegenInputError");
            } else {
                for (Class<?> c = thrown[0].getClass(); c != null && c != Object.class; c = c.getSuperclass())
                    names.add(c.getSimpleName());
            }
            line.add("raised", names);
            String message = thrown[0].getMessage();
            line.addProperty("message", message == null ? "" : message);
        } else {
            com.google.gson.JsonElement returned;
            try {
                returned = plain(GSON.toJsonTree(value[0]), 0);
            } catch (RuntimeException e) {
                returned = new com.google.gson.JsonPrimitive(String.valueOf(value[0]));
            }
            line.add("returned", returned);
        }
        report.println(GSON.toJson(line));
        report.flush();
    }

    public static void main(String[] args) throws Exception {
        report = new java.io.PrintStream(new java.io.FileOutputStream(REPORT), false, "UTF-8");
        java.io.PrintStream nowhere = new java.io.PrintStream(java.io.OutputStream.nullOutputStream());
        System.setOut(nowhere);
        System.setErr(nowhere);
        com.google.gson.JsonObject first = new com.google.gson.JsonObject();
        first.addProperty("nonce", NONCE);
        report.println(GSON.toJson(first));
        report.flush();
        cases();
        System.exit(0);
    }
