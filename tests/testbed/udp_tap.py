"""Test helper run inside a namespace host: listen to a multicast group, or send raw datagrams.

    python tests/testbed/udp_tap.py listen IFACE GROUP PORT SECONDS OUTFILE   # every datagram, msgpack'ed list
    python tests/testbed/udp_tap.py send IFACE GROUP PORT INFILE [GAP]        # each datagram of a msgpack'ed list,
                                                                      # GAP seconds apart (default 0.005)
"""

import socket
import struct
import sys
import time

import msgpack


def listen(iface, group, port, seconds, out):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((group, port))
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                    struct.pack("4s4s", socket.inet_aton(group), socket.inet_aton(iface)))
    sock.settimeout(0.2)
    captured, deadline = [], time.time() + seconds
    print("listening", flush=True)
    while time.time() < deadline:
        try:
            captured.append(sock.recv(65536))
        except socket.timeout:
            pass
    with open(out, "wb") as f:
        f.write(msgpack.packb(captured))


def send(iface, group, port, infile, gap=0.005):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(iface))
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
    with open(infile, "rb") as f:
        for datagram in msgpack.unpackb(f.read()):
            sock.sendto(datagram, (group, port))
            time.sleep(gap)


if __name__ == "__main__":
    if sys.argv[1] == "listen":
        listen(sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), sys.argv[6])
    else:
        send(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], *map(float, sys.argv[6:7]))
