#!/usr/bin/perl
# hold_connections.pl — a user who floods accountd: opens COUNT connections and holds them, idle,
# until its stdin closes (tests/it/overload.rs runs it as alice). Prints "held N" once connected.
#   perl hold_connections.pl tcp HOST:PORT FROM_ADDRESS COUNT
#   perl hold_connections.pl unix SOCKET_PATH COUNT
use strict;
use warnings;
use IO::Socket::INET;
use IO::Socket::UNIX;

my $kind = shift // '';
my @held;
if ($kind eq 'tcp' && @ARGV == 3) {
    my ($to, $from, $count) = @ARGV;
    for (1 .. $count) {
        my $s = IO::Socket::INET->new(PeerAddr => $to, LocalAddr => $from, Proto => 'tcp')
            or die "connect to $to from $from: $!\n";
        push @held, $s;
    }
} elsif ($kind eq 'unix' && @ARGV == 2) {
    my ($path, $count) = @ARGV;
    for (1 .. $count) {
        my $s = IO::Socket::UNIX->new(Peer => $path, Type => SOCK_STREAM) or die "connect to $path: $!\n";
        push @held, $s;
    }
} else {
    die "usage: hold_connections.pl tcp HOST:PORT FROM COUNT | unix PATH COUNT\n";
}
$| = 1;
print "held " . scalar(@held) . "\n";
my $until_closed = <STDIN>;
