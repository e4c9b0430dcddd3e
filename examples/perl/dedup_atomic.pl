#!/usr/bin/env perl
# dedup-atomic over onceproof's open owner protocol (PROTOCOL.md, version 1), in Perl 5 with
# DBI and DBD::SQLite (Debian: libdbd-sqlite3-perl; JSON::PP is core Perl). One file, no
# module of its own.
#
# Per record, after `fetch`: `apply-deduped`, one transaction that inserts the record's id
# (partition, offset) into `processed` and, only if it was not there, adds the delta to the
# total (a replayed or zombie record is recognised and skipped); then `commit-offset`, the next
# offset written blindly (no epoch check, as the model's row). Each record's effect lands
# exactly once whatever crashes, rebalances and second incarnations do; the checkpoint may
# move back under a zombie's commit, which the model's row predicts (monotonic-checkpoint).
# A lease with nothing in flight stops without writing when the log lost records its group
# consumed (`refuse-ahead`) or retention removed its next record (`fail-out-of-range`).
#
#     conformance replay --worker 'perl examples/perl/dedup_atomic.pl' --strategy dedup-atomic tests/traces
#     conformance test --worker 'perl examples/perl/dedup_atomic.pl' --strategy dedup-atomic --walks 15 --seed 1 \
#         --owners 3 --partitions 2 --crashes 2 --rebalances 2 --pauses 1 --retentions 1 --log-losses 1 --ack-losses 1
#
# `--no-dedup` inserts the id but never consults it: the deliberately broken variant, which
# conformance must catch (a replayed or zombie record's effect lands again).
#
# The store, one SQLite file STORE/store.db (store.observe.toml reads it):
#     totals(grp PRIMARY KEY, total)                  the effect: total += delta
#     progress(grp, part, next_offset, epoch, owner)  the group's progress; the epoch is kept, never checked
#     processed(grp, part, offset)                    the ids of the records applied
use strict;
use warnings;
use DBI;
use JSON::PP;

my $JSON = JSON::PP->new->utf8->canonical;
my $STRATEGY = 'dedup-atomic';
my $DEDUP = !grep { $_ eq '--no-dedup' } @ARGV;

# An error reply (PROTOCOL.md, "Errors"): died with, caught by the serving loop.
sub fail {
    my ($code, $text, $definite) = @_;
    die { code => $code, text => $text, definite => $definite // 1 };
}

sub not_enabled { fail('not-enabled', $_[0]) }

# A request's field, which must be present.
sub need {
    my ($request, $name) = @_;
    fail('malformed', "no field '$name'") unless exists $request->{$name} && defined $request->{$name};
    return $request->{$name};
}

# Numbers as JSON numbers (JSON::PP writes a scalar once used as a string as a string).
sub n { return 0 + $_[0] }

# ---- the store ----

sub open_store {
    my ($directory, $create) = @_;
    my $path = "$directory/store.db";
    fail('refused', "no store at $path: the store role's setup creates it") if !$create && !-e $path;
    my $db = DBI->connect("dbi:SQLite:dbname=$path", '', '',
        { RaiseError => 1, PrintError => 0, AutoCommit => 1, sqlite_use_immediate_transaction => 1 });
    $db->sqlite_busy_timeout(10_000);
    $db->do('PRAGMA synchronous = EXTRA');
    if ($create) {
        $db->do('CREATE TABLE IF NOT EXISTS totals (grp TEXT PRIMARY KEY, total INTEGER NOT NULL)');
        $db->do('CREATE TABLE IF NOT EXISTS progress (grp TEXT NOT NULL, part INTEGER NOT NULL, '
            . 'next_offset INTEGER NOT NULL, epoch INTEGER NOT NULL, owner TEXT NOT NULL, PRIMARY KEY (grp, part))');
        $db->do('CREATE TABLE IF NOT EXISTS processed (grp TEXT NOT NULL, part INTEGER NOT NULL, '
            . 'offset INTEGER NOT NULL, PRIMARY KEY (grp, part, offset))');
    }
    return $db;
}

# BEGIN IMMEDIATE ... COMMIT around $body, or ROLLBACK when it dies. $inside runs after the
# body's statements, before COMMIT (a crash point's `inside`).
sub transaction {
    my ($db, $body, $inside) = @_;
    $db->begin_work;
    my $result = eval { my $r = $body->($db); $inside->() if $inside; $r };
    if (my $error = $@) {
        eval { $db->rollback };
        die $error;
    }
    $db->commit;
    return $result;
}

# (next offset, epoch, owner) of a partition's row.
sub progress_row {
    my ($db, $group, $partition) = @_;
    my $row = $db->selectrow_arrayref('SELECT next_offset, epoch, owner FROM progress WHERE grp = ? AND part = ?',
        undef, $group, $partition);
    fail('storage', "no progress row for $group/$partition") unless $row;
    return @$row;
}

# ---- the store role: setup, claim (a rebalance), observe ----

sub store_role {
    my ($init) = @_;
    my $role = { directory => need($init, 'store'), partitions => need($init, 'partitions') };
    my $db;
    my $opened = sub { $db //= open_store($role->{directory}, $_[0]) };
    return sub {
        my ($type, $request) = @_;
        if ($type eq 'setup') {
            my ($group, $owner) = (need($request, 'group'), need($request, 'owner'));
            transaction($opened->(1), sub {
                my ($db) = @_;
                $db->do('INSERT OR IGNORE INTO totals VALUES (?, 0)', undef, $group);
                for my $partition (0 .. $role->{partitions} - 1) {
                    $db->do('INSERT OR IGNORE INTO progress VALUES (?, ?, 0, 1, ?)', undef, $group, $partition, $owner);
                }
            });
            return {};
        }
        if ($type eq 'claim') {
            my ($group, $partition, $owner) = map { need($request, $_) } qw(group partition owner);
            my $epoch = transaction($opened->(0), sub {
                my ($db) = @_;
                $db->do('UPDATE progress SET epoch = epoch + 1, owner = ? WHERE grp = ? AND part = ?',
                    undef, $owner, $group, $partition);
                return (progress_row($db, $group, $partition))[1];
            });
            return { epoch => n($epoch) };
        }
        if ($type eq 'observe') {
            my $group = need($request, 'group');
            my $db = $opened->(0);
            my ($total) = $db->selectrow_array('SELECT total FROM totals WHERE grp = ?', undef, $group);
            my @partitions = map {
                my ($next_offset, $epoch, $owner) = progress_row($db, $group, $_);
                { next_offset => n($next_offset), epoch => n($epoch), owner => "$owner", stamp => undef }
            } 0 .. $role->{partitions} - 1;
            my $ids = $db->selectall_arrayref(
                'SELECT part, offset FROM processed WHERE grp = ? ORDER BY part, offset', undef, $group);
            my @processed = map { { partition => n($_->[0]), offset => n($_->[1]) } } @$ids;
            return { total => n($total // 0), partitions => \@partitions, processed => \@processed };
        }
        fail('malformed', "'$type' is no request of the store role");
    };
}

# ---- the owner role ----

# A lease: the epoch the partition was taken at, the next offset to fetch, the next offset of
# the last checkpoint written or taken, and the records in flight (offset => [stage, delta]).
sub lease {
    my ($epoch, $next_offset) = @_;
    return { epoch => $epoch, position => $next_offset, checkpoint => $next_offset, records => {} };
}

sub owner_role {
    my ($init) = @_;
    my $strategy = need($init, 'strategy');
    fail('not-supported', "strategy '$strategy' (this consumer is $STRATEGY)") unless $strategy eq $STRATEGY;
    my $settings = need($init, 'settings');
    my ($out_of_range, $log_check) = ($settings->{on_out_of_range} // '', $settings->{log_check} // '');
    fail('not-supported', "--on-out-of-range $out_of_range --log-check $log_check (this consumer runs the defaults)")
        unless $out_of_range eq 'fail' && $log_check eq 'refuse-ahead';
    my ($group, $name) = (need($init, 'group'), need($init, 'owner'));
    my $start = $init->{start} // 'claim';
    fail('not-supported', "start '$start'") unless $start eq 'claim' || $start eq 'stored';
    my $db = open_store(need($init, 'store'), 0);
    my $partitions = need($init, 'partitions');
    my (%leases, @armed);

    # The coordinator hands a starting owner every partition its row names it owner of; it
    # resumes each from the committed next offset, at a new epoch it claims (one transaction
    # for all, so that an earlier incarnation still running is stale) or at the stored one.
    transaction($db, sub {
        for my $partition (0 .. $partitions - 1) {
            my ($next_offset, $epoch, $owner) = progress_row($db, $group, $partition);
            next unless $owner eq $name;
            if ($start eq 'claim') {
                $epoch += 1;
                $db->do('UPDATE progress SET epoch = ? WHERE grp = ? AND part = ?', undef, $epoch, $group, $partition);
            }
            $leases{$partition} = lease($epoch, $next_offset);
        }
    });

    # Dies here by SIGKILL if an armed crash point names this step and moment.
    my $crash_point = sub {
        my ($step, $offset, $when) = @_;
        for my $point (@armed) {
            my ($s, $w, $o) = @$point;
            kill 'KILL', $$ if $s eq $step && $w eq $when && (!defined $o || $o == $offset);
        }
    };

    # The record in flight at $offset, which must be at $stage.
    my $in_flight = sub {
        my ($step, $lease, $offset, $stage) = @_;
        my $record = $lease->{records}{$offset};
        not_enabled("$step $offset: no record at $offset in stage $stage") unless $record && $record->[0] eq $stage;
        return $record;
    };

    # Whether a lease with nothing in flight must stop working on the partition, and how
    # (spec.md §3, the model's lease_actions): `refuse-ahead` when its group's stored next
    # offset or its own position is past the log's end (the log lost records the group
    # consumed), else `fail-out-of-range` when retention removed the record at its position.
    # Returns (step, stored next offset), or () when it may go on.
    my $must_stop = sub {
        my ($partition, $lease, $log) = @_;
        return () if %{ $lease->{records} } || !$log;
        my ($stored) = progress_row($db, $group, $partition);
        return ('refuse-ahead', $stored) if $stored > $log->{end} || $lease->{position} > $log->{end};
        return ('fail-out-of-range', $stored) if $lease->{position} < $log->{start};
        return ();
    };

    my %steps = (
        'fetch' => sub {
            my ($partition, $offset, $lease, $request) = @_;
            my ($record) = grep { $_->{offset} == $offset } @{ $request->{records} // [] };
            my $log = $request->{log};
            not_enabled("fetch $partition $offset: the position is $lease->{position}")
                unless $record && $offset == $lease->{position};
            not_enabled("fetch $partition $offset: the log holds $log->{start}..$log->{end}")
                if $log && !($log->{start} <= $offset && $offset < $log->{end});
            my ($stop) = $must_stop->($partition, $lease, $log);
            not_enabled("fetch $partition $offset: the lease must $stop first") if $stop;
            # The model meets poison records in the poison rows only; this is none of them.
            fail('not-supported', 'a poison record (this consumer has no poison policy)') if $record->{poison};
            $lease->{records}{$offset} = ['fetched', need($record, 'delta')];
            $lease->{position} = $offset + 1;
            return { outcome => 'fetched', count => 1 };
        },
        # The effect and the record's id in one transaction; a record already processed (a
        # replay, a zombie's) is skipped. No epoch check: the id is the guard.
        'apply-deduped' => sub {
            my ($partition, $offset, $lease) = @_;
            my $record = $in_flight->('apply-deduped', $lease, $offset, 'fetched');
            $crash_point->('apply-deduped', $offset, 'before');
            my $fresh = transaction($db, sub {
                my $inserted = $db->do('INSERT OR IGNORE INTO processed VALUES (?, ?, ?)', undef,
                    $group, $partition, $offset);
                return 0 if $inserted == 0 && $DEDUP;
                $db->do('UPDATE totals SET total = total + ? WHERE grp = ?', undef, $record->[1], $group);
                return 1;
            }, sub { $crash_point->('apply-deduped', $offset, 'inside') });
            $crash_point->('apply-deduped', $offset, 'after');
            $record->[0] = 'effect-applied';
            return { outcome => 'applied', applied => n($fresh), skipped => n(1 - $fresh) };
        },
        # The next offset, written blindly (the row's commit has no guard).
        'commit-offset' => sub {
            my ($partition, $next_offset, $lease) = @_;
            $in_flight->('commit-offset', $lease, $next_offset - 1, 'effect-applied');
            $crash_point->('commit-offset', $next_offset, 'before');
            transaction($db, sub {
                $db->do('UPDATE progress SET next_offset = ? WHERE grp = ? AND part = ?', undef,
                    $next_offset, $group, $partition);
            }, sub { $crash_point->('commit-offset', $next_offset, 'inside') });
            $crash_point->('commit-offset', $next_offset, 'after');
            delete $lease->{records}{ $next_offset - 1 };
            $lease->{checkpoint} = $next_offset;
            $lease->{position} = $next_offset if $next_offset > $lease->{position};
            return { outcome => 'committed' };
        },
    );
    # `refuse-ahead` and `fail-out-of-range`: nothing written, the lease dropped.
    for my $stop ('refuse-ahead', 'fail-out-of-range') {
        $steps{$stop} = sub {
            my ($partition, $offset, $lease, $request) = @_;
            my $log = $request->{log};
            my ($must, $stored) = $must_stop->($partition, $lease, $log);
            not_enabled("$stop $partition $offset: the lease is at $lease->{position}")
                unless $must && $must eq $stop && $offset == $lease->{position};
            delete $leases{$partition};
            return { outcome => 'refused', stored => n($stored), position => n($lease->{position}), end => n($log->{end}) }
                if $stop eq 'refuse-ahead';
            return { outcome => 'out-of-range', position => n($lease->{position}), start => n($log->{start}) };
        };
    }

    return sub {
        my ($type, $request) = @_;
        if ($type eq 'step') {
            my ($step, $partition, $offset) = map { need($request, $_) } qw(step partition offset);
            my $lease = $leases{$partition};
            not_enabled("$step $partition $offset: no lease on partition $partition") unless $lease;
            my $perform = $steps{$step};
            fail('not-supported', "step '$step' (this consumer is $STRATEGY)") unless $perform;
            return $perform->($partition, $offset, $lease, $request);
        }
        if ($type eq 'assign') {
            my $partition = need($request, 'partition');
            my ($next_offset, $epoch, $owner) = progress_row($db, $group, $partition);
            return { epoch => undef } unless $owner eq $name;
            $leases{$partition} = lease($epoch, $next_offset);
            return { epoch => n($epoch) };
        }
        if ($type eq 'leases') {
            my @leases = map {
                my $lease = $leases{$_};
                my $records = $lease->{records};
                {   partition => n($_), epoch => n($lease->{epoch}), position => n($lease->{position}),
                    checkpoint => n($lease->{checkpoint}), done => [],
                    records => [map { { offset => n($_), stage => $records->{$_}[0] } } sort { $a <=> $b } keys %$records],
                }
            } sort { $a <=> $b } keys %leases;
            return { leases => \@leases };
        }
        if ($type eq 'arm') {
            my $point = need($request, 'point');
            fail('malformed', "crash point '$point' is not STEP:WHEN[\@OFFSET]")
                unless $point =~ /^([a-z-]+):(before|inside|after)(?:@(\d+))?$/;
            push @armed, [$1, $2, $3];
            return {};
        }
        fail('malformed', "'$type' is no request of the owner role");
    };
}

# ---- the loop: one request, one flushed reply ----

sub reply {
    my ($id, $body) = @_;
    print STDOUT $JSON->encode(defined $id ? { in_reply_to => n($id), %$body } : $body), "\n";
}

$| = 1;
my $served;
while (my $line = <STDIN>) {
    my ($id, $body);
    my $ok = eval {
        my $request = eval { $JSON->decode($line) };
        fail('malformed', "not JSON: $@") unless ref $request eq 'HASH';
        $id = $request->{id};
        my $type = need($request, 'type');
        if (!$served) {
            fail('malformed', "'$type' before init") unless $type eq 'init';
            fail('not-supported', "protocol version $request->{protocol}") unless ($request->{protocol} // 0) == 1;
            my $role = need($request, 'role');
            $served = $role eq 'store' ? store_role($request)
                : $role eq 'owner' ? owner_role($request)
                : fail('malformed', "role '$role'");
            $body = { type => 'init_ok', protocol => 1 };
        } elsif ($type eq 'quit') {
            reply($id, { type => 'quit_ok' });
            exit 0;
        } else {
            $body = { type => "${type}_ok", %{ $served->($type, $request) } };
        }
        1;
    };
    if (!$ok) {
        my $error = $@;
        # Any other death is the store's (DBI raises its errors): it may have taken effect.
        $error = { code => 'storage', text => "$error", definite => 0 } unless ref $error eq 'HASH';
        chomp $error->{text};
        $body = { type => 'error', code => $error->{code}, text => $error->{text},
            definite => $error->{definite} ? JSON::PP::true : JSON::PP::false };
        if (!$served) {
            reply($id, $body) if defined $id;
            exit 2;
        }
    }
    reply($id, $body);
}
exit 0;
