#!/bin/sh
# Setup shared by every sandbox image, run as root in the base rootfs as its last step
# (sandbox-images/build -> scripts/lib/rootfs.sh: an mmdebstrap customize hook, chroot). Part
# of the base's hash: a change here rebuilds every base.
set -eu
# the programs' unprivileged user/group 10002, no login shell, no writable home
echo 'sandbox:x:10002:' >> /etc/group
echo 'sandbox:x:10002:10002:codegen sandbox:/nonexistent:/usr/sbin/nologin' >> /etc/passwd
if [ -f /etc/shadow ]; then echo 'sandbox:*:19000:0:99999:7:::' >> /etc/shadow; fi
if [ -f /etc/gshadow ]; then echo 'sandbox:*::' >> /etc/gshadow; fi
# no caches, lists, docs or logs (mostly already absent in the offline rootfs). Not /tmp:
# mmdebstrap keeps its apt configuration there until it ends, and its clean-up, without it,
# would empty the host's own apt lists (the sandbox's /tmp is a tmpfs anyway).
rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old \
       /var/log/* /usr/share/doc/* /usr/share/man/* /usr/share/info/* \
       /usr/share/locale/*
mkdir -p /work /opt/codegen
chown 10002:10002 /work
chmod 0700 /work
# the runner's folder: root's, read-only (the Dockerfile copies the files in, mode 0444)
chown 0:0 /opt/codegen
chmod 0555 /opt/codegen
# no setuid/setgid programs (su, newgrp): no-new-privileges already defuses them
find / -xdev -type f -perm /6000 -exec chmod ug-s {} +
