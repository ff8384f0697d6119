# Starts the class compile.sh chose (run by the codegen runner as the program's uid, cwd /work).
# The heap may use most of the container's memory limit (the JVM's default is a quarter).
read -r main < /build/main-class
exec /usr/bin/java -XX:+UseSerialGC -XX:MaxRAMPercentage=75 -Xshare:auto -cp /build/classes "$main"
