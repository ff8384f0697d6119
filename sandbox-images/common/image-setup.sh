#!/bin/sh
# Build-time setup shared by every sandbox image (run once by each Dockerfile as root):
#   image-setup.sh "PACKAGES"
# PACKAGES is empty offline (the base rootfs already has them); otherwise they are
# installed with apt first (a build FROM a stock Debian image).
set -eu
if [ -n "${1:-}" ]; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $1
    apt-get clean
fi
# the programs' unprivileged user/group 10002, no login shell, no writable home
echo 'sandbox:x:10002:' >> /etc/group
echo 'sandbox:x:10002:10002:codegen sandbox:/nonexistent:/usr/sbin/nologin' >> /etc/passwd
if [ -f /etc/shadow ]; then echo 'sandbox:*:19000:0:99999:7:::' >> /etc/shadow; fi
if [ -f /etc/gshadow ]; then echo 'sandbox:*::' >> /etc/gshadow; fi
# no caches, lists, docs or logs (mostly already absent in the offline rootfs)
rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old \
       /var/log/* /usr/share/doc/* /usr/share/man/* /usr/share/info/* \
       /usr/share/locale/* /tmp/* /var/tmp/*
mkdir -p /work /opt/codegen
chown 10002:10002 /work
chmod 0700 /work
# no setuid/setgid programs (su, newgrp): no-new-privileges already defuses them
find / -xdev -type f -perm /6000 -exec chmod ug-s {} +
