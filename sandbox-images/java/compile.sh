# Compiles /work/Main.java into /build/classes (run by the codegen runner as the program's uid,
# cwd /work) and writes the class to start to /build/main-class.
#
# javac wants a public class in a file of its name, so the source is copied to
# /build/src/<that name>.java (Main.java without one). The class started is the one that
# declares `static void main`: the last class declared before it in the source.
set -e
src=$1
name=$(sed -n 's/^.*public[[:space:]]\{1,\}\(final[[:space:]]\{1,\}\|abstract[[:space:]]\{1,\}\)*class[[:space:]]\{1,\}\([A-Za-z_$][A-Za-z0-9_$]*\).*$/\2/p' "$src" | head -n 1)
[ -n "$name" ] || name=Main
mkdir -p /build/src /build/classes
cp "$src" "/build/src/$name.java"
main=$(awk '
  { line = $0
    while (match(line, /(class|interface|enum|record)[ \t]+[A-Za-z_$][A-Za-z0-9_$]*/)) {
      decl = substr(line, RSTART, RLENGTH); sub(/^(class|interface|enum|record)[ \t]+/, "", decl)
      last = decl; line = substr(line, RSTART + RLENGTH) }
    if ($0 ~ /static[ \t]+(public[ \t]+)?void[ \t]+main[ \t]*\(/ && last != "") { print last; exit } }
' "$src")
[ -n "$main" ] || main=$name
printf '%s\n' "$main" > /build/main-class
exec /usr/bin/javac -J-XX:+UseSerialGC -J-XX:TieredStopAtLevel=1 -J-Xshare:auto \
  -encoding UTF-8 -nowarn -d /build/classes "/build/src/$name.java"
