# Starts the class compile.sh chose (run by the codegen runner as the program's uid, cwd /work).
# The heap may use most of the container's memory limit (the JVM's default is a quarter).
read -r main < /build/main-class
# -ea: assertions on, as SandboxFusion and every Java test harness run them (off, `assert`
# in a test could never fail). The libraries of compile.sh on the class path.
exec /usr/bin/java -ea -XX:+UseSerialGC -XX:MaxRAMPercentage=75 -Xshare:auto \
  -cp /build/classes:/usr/share/java/javatuples.jar:/usr/share/java/gson.jar "$main"
