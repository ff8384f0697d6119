# Compiles /work/Main.java into /build/classes (run by the codegen runner as the program's uid,
# cwd /work) and writes the class to start to /build/main-class.
#
# javac wants a public class in a file of its name, so the source is copied to
# /build/src/<that name>.java (Main.java without one). The class started is the one that
# declares `static void main`: the last top-level class declared before it in the source.
set -e
src=$1
name=$(sed -n 's/^.*public[[:space:]]\{1,\}\(final[[:space:]]\{1,\}\|abstract[[:space:]]\{1,\}\)*class[[:space:]]\{1,\}\([A-Za-z_$][A-Za-z0-9_$]*\).*$/\2/p' "$src" | head -n 1)
[ -n "$name" ] || name=Main
mkdir -p /build/src /build/classes
cp "$src" "/build/src/$name.java"
main=$(awk '
  { n = length($0)
    for (i = 1; i <= n; i++) {
      c = substr($0, i, 1)
      if (c == "{") { depth++; continue }
      if (c == "}") { depth--; continue }
      # Only top-level declarations: a record or class nested in Main before its main is
      # not the class to start.
      if (depth == 0 && (i == 1 || substr($0, i - 1, 1) !~ /[A-Za-z0-9_$]/) &&
          match(substr($0, i), /^(class|interface|enum|record)[ \t]+[A-Za-z_$][A-Za-z0-9_$]*/)) {
        decl = substr($0, i, RLENGTH); sub(/^(class|interface|enum|record)[ \t]+/, "", decl)
        last = decl; i += RLENGTH - 1 } }
    if ($0 ~ /static[ \t]+(public[ \t]+)?void[ \t]+main[ \t]*\(/ && last != "") { print last; exit } }
' "$src")
[ -n "$main" ] || main=$name
printf '%s\n' "$main" > /build/main-class
# Quiet (-nowarn), but every lint's warnings when the work directory holds .codegen-lint
# (proto::harness::LINT_FILE: the worker asks for generated code's quality report).
warn=-nowarn
[ ! -e /work/.codegen-lint ] || warn=-Xlint:all
# The libraries benchmarks import (javatuples: HumanEval-X, MultiPL-E; gson), from Debian's
# packages (java/Dockerfile checks their jars are there).
exec /usr/bin/javac -J-XX:+UseSerialGC -J-XX:TieredStopAtLevel=1 -J-Xshare:auto \
  -encoding UTF-8 "$warn" -cp /usr/share/java/javatuples.jar:/usr/share/java/gson.jar -d /build/classes "/build/src/$name.java"
