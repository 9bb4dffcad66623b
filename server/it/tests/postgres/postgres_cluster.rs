//! The PostgreSQL test cluster itself (`common::postgres`): the primary has pgvector, a
//! `halfvec` row written on the primary reaches the streaming replica (which refuses
//! writes), a primary killed with SIGKILL comes back on its data with the committed row,
//! and the replica streams from it again, also after being stopped and started. Start
//! and restart times are printed (never asserted on).

use crate::common;

use std::time::Instant;

use common::postgres::{PostgresCluster, Role};

const DB: &str = "cluster_probe";

#[tokio::test]
async fn replica_streams_and_a_killed_primary_keeps_its_rows() {
    let started = Instant::now();
    let cluster = PostgresCluster::shared();
    eprintln!(
        "primary and streaming replica up after {:.1?} (data and logs in {})",
        started.elapsed(),
        cluster.dir().display()
    );
    assert!(std::ptr::eq(cluster, PostgresCluster::shared()));
    assert!(cluster.primary_url(DB).starts_with("postgres://postgres@127.0.0.1:"));
    assert_ne!(cluster.primary_url(DB), cluster.replica_url(DB));

    cluster.create_database(DB);
    cluster.sql(DB, "CREATE EXTENSION vector");
    cluster.sql(DB, "CREATE TABLE probe (id bigint PRIMARY KEY, embedding halfvec(3) NOT NULL)");
    cluster.sql(DB, "INSERT INTO probe VALUES (1, '[0.5,0.25,-1]')");
    let row = "1|[0.5,0.25,-1]";
    assert_eq!(cluster.sql(DB, "SELECT id, embedding FROM probe"), row);

    // Streaming, not a copy: the replica sees the row without being told.
    let written = Instant::now();
    let mut seen = String::new();
    while written.elapsed() < std::time::Duration::from_secs(5) {
        seen = cluster.try_replica_sql(DB, "SELECT id, embedding FROM probe").unwrap_or_default();
        if seen == row {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(seen, row, "the replica did not receive the row within 5 s\n{}", cluster.logs());
    eprintln!("row visible on the replica {:.0?} after the commit", written.elapsed());
    assert_eq!(cluster.replica_sql(DB, "SELECT pg_is_in_recovery()"), "t");
    let refused = cluster.try_replica_sql(DB, "INSERT INTO probe VALUES (2, '[1,1,1]')").unwrap_err();
    assert!(refused.contains("read-only transaction"), "{refused}");

    cluster.kill(Role::Primary);
    assert!(!cluster.is_running(Role::Primary));
    assert!(cluster.try_sql(DB, "SELECT 1").is_err());
    let restarted = Instant::now();
    cluster.start_server(Role::Primary);
    eprintln!("primary restarted after SIGKILL, accepting connections after {:.1?}", restarted.elapsed());
    assert_eq!(cluster.sql(DB, "SELECT id, embedding FROM probe"), row);
    cluster.sql(DB, "INSERT INTO probe VALUES (2, '[1,1,1]')");
    let caught_up = Instant::now();
    cluster.wait_replica_caught_up();
    eprintln!("replica caught up with the restarted primary after {:.1?}", caught_up.elapsed());
    assert_eq!(cluster.replica_sql(DB, "SELECT count(*) FROM probe"), "2");

    cluster.stop(Role::Replica);
    assert!(!cluster.is_running(Role::Replica));
    cluster.sql(DB, "INSERT INTO probe VALUES (3, '[2,2,2]')");
    let restarted = Instant::now();
    cluster.start_server(Role::Replica);
    cluster.wait_replica_caught_up();
    eprintln!("replica restarted and caught up after {:.1?}", restarted.elapsed());
    assert_eq!(cluster.replica_sql(DB, "SELECT count(*) FROM probe"), "3");
}
