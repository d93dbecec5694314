//! Tests against a real Kafka broker (4.3.1, KRaft), started once per test process by
//! `scripts/kafka-server.sh` (or the one `WEFT_KAFKA_BROKERS` names). A broker that cannot be
//! started fails the tests; they never skip.

use super::*;
use crate::batch::ProducerStamp;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Duration;
use tokio::time::Instant;

/// The test broker's listeners: plaintext, SASL over TLS, and TLS with client certificates.
struct Broker {
    plain: String,
    sasl_ssl: String,
    ssl: String,
    tls_dir: std::path::PathBuf,
}

/// How long the broker lets a SASL session last before the client must authenticate again.
const REAUTH_MS: u64 = 6_000;

fn test_broker() -> &'static Broker {
    static BROKER: OnceLock<Result<Broker, String>> = OnceLock::new();
    BROKER
        .get_or_init(|| {
            let vars: HashMap<String, String> = if std::env::var("WEFT_KAFKA_BROKERS").is_ok() {
                std::env::vars().collect()
            } else {
                let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/kafka-server.sh");
                let dir = std::env::temp_dir().join(format!("weft-kafka-test-{}", std::process::id()));
                let port = std::net::TcpListener::bind("127.0.0.1:0")
                    .unwrap()
                    .local_addr()
                    .unwrap()
                    .port();
                let out = Command::new("bash")
                    .arg(&script)
                    .arg("start")
                    .arg(&dir)
                    .arg(port.to_string())
                    .env("KAFKA_SERVER_OWNER_PID", std::process::id().to_string())
                    .env("KAFKA_SERVER_SECURE", "1")
                    .env("KAFKA_SERVER_REAUTH_MS", REAUTH_MS.to_string())
                    .output()
                    .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
                if !out.status.success() {
                    return Err(format!(
                        "the Kafka test broker did not start (`{} start {} {port}`, needs java 17, mvn and openssl):\n{}",
                        script.display(),
                        dir.display(),
                        String::from_utf8_lossy(&out.stderr)
                    ));
                }
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .filter_map(|l| l.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            };
            let get = |k: &str| {
                vars.get(k)
                    .cloned()
                    .ok_or_else(|| format!("the test broker's environment lacks {k} (KAFKA_SERVER_SECURE=1)"))
            };
            Ok(Broker {
                plain: get("WEFT_KAFKA_BROKERS")?,
                sasl_ssl: get("WEFT_KAFKA_SASL_SSL_BROKERS")?,
                ssl: get("WEFT_KAFKA_SSL_BROKERS")?,
                tls_dir: get("WEFT_KAFKA_TLS_DIR")?.into(),
            })
        })
        .as_ref()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn broker() -> String {
    test_broker().plain.clone()
}

async fn client() -> Arc<Client> {
    let cfg = ClientConfig {
        brokers: vec![broker()],
        client_id: "weft-kafka-test".into(),
        ..Default::default()
    };
    Client::connect(cfg).await.expect("connect to the test broker")
}

fn topic(name: &str) -> String {
    format!("{name}-{}", std::process::id())
}

async fn read_all(c: &Client, topic: &str, partition: i32) -> Vec<FetchedRecord> {
    let end = c.list_offset(topic, partition, OffsetAt::Latest).await.unwrap();
    let mut at = c.list_offset(topic, partition, OffsetAt::Earliest).await.unwrap();
    let mut out = Vec::new();
    while at < end {
        let f = c
            .fetch(topic, partition, at, 1 << 20, 1, Duration::from_millis(200))
            .await
            .unwrap();
        let (records, next) = f.into_records().unwrap();
        assert!(next > at || !records.is_empty(), "fetch made no progress at {at}");
        at = next;
        out.extend(records);
    }
    out
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(20)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_are_created_once_and_report_their_partitions() {
    let c = client().await;
    let t = topic("create");
    assert!(
        c.create_topic(&t, 3, 1, &[("max.message.bytes", "4194304")])
            .await
            .unwrap()
    );
    assert!(
        !c.create_topic(&t, 3, 1, &[]).await.unwrap(),
        "second create says it exists"
    );
    assert_eq!(c.partition_count(&t).await.unwrap(), 3);
    let err = c.partition_count(&topic("missing")).await.unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sends_land_once_each_in_order_per_partition() {
    let c = client().await;
    let t = topic("sends");
    c.create_topic(&t, 4, 1, &[]).await.unwrap();
    let p = Arc::new(Producer::new(c.clone(), &t, Compression::None));
    let mut tasks = Vec::new();
    for task in 0..16 {
        let p = p.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..20 {
                let head = format!("task {task} send {i} ");
                let tail = vec![b'x'; (task * 37 + i) % 300];
                let parts: [&[u8]; 2] = [head.as_bytes(), &tail];
                let headers: [(&str, &[u8]); 1] = [("v", b"1")];
                let rec = |n: i64| Record {
                    key: Some(b"tenant"),
                    value_parts: &parts,
                    headers: &headers,
                    timestamp_ms: 1_700_000_000_000 + n,
                };
                // Every partition gets one batch of (partition + 1) records.
                let sends: Vec<_> = (0..4)
                    .map(|part| PartitionRecords {
                        partition: part,
                        records: (0..=part as i64).map(rec).collect(),
                    })
                    .collect();
                p.send(&sends, deadline()).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    for part in 0..4 {
        let recs = read_all(&c, &t, part).await;
        assert_eq!(recs.len(), 16 * 20 * (part as usize + 1), "partition {part}");
        let mut last_send: HashMap<usize, i64> = HashMap::new();
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(r.offset, i as i64, "offsets are dense");
            assert_eq!(r.key.as_deref(), Some(&b"tenant"[..]));
            assert_eq!(r.header("v"), Some(&b"1"[..]));
            let text = String::from_utf8_lossy(&r.value);
            let mut words = text.split(' ');
            let task: usize = words.nth(1).unwrap().parse().unwrap();
            let send: i64 = words.nth(1).unwrap().parse().unwrap();
            let tail = words.next().unwrap();
            assert_eq!(tail.len(), (task * 37 + send as usize) % 300);
            let prev = last_send.insert(task, send).unwrap_or(-1);
            assert!(
                send == prev || send == prev + 1,
                "task {task}: send {send} after {prev}"
            );
        }
    }
    assert_eq!(p.stats.failures.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert_eq!(p.stats.batches.load(std::sync::atomic::Ordering::Relaxed), 16 * 20 * 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_batch_is_dropped_by_the_broker() {
    let c = client().await;
    let t = topic("idem");
    c.create_topic(&t, 1, 1, &[]).await.unwrap();
    let p = Producer::new(c.clone(), &t, Compression::None);
    let parts: [&[u8]; 1] = [b"once"];
    let records = [Record {
        key: None,
        value_parts: &parts,
        headers: &[],
        timestamp_ms: 0,
    }];
    let mut batch = Vec::new();
    write_batch(&mut batch, &records, ProducerStamp::NONE, Compression::None).unwrap();
    p.ensure_producer_id().await.unwrap();
    let item = || producer::tests_support::item(0, 1, batch.clone());
    // The first copy takes a stamp; the second reuses it, as a retry after a lost answer does.
    let (conn, first) = (c.leader(&t, 0).await.unwrap().1, item());
    let (left, err) = p.produce_to(conn.clone(), vec![first], deadline()).await;
    assert!(left.is_empty() && err.is_none(), "{err:?}");
    let stamp = p.last_stamp(0);
    let mut again = item();
    again.stamp = Some(stamp);
    let (left, err) = p.produce_to(conn, vec![again], deadline()).await;
    assert!(left.is_empty() && err.is_none(), "{err:?}");
    let recs = read_all(&c, &t, 0).await;
    assert_eq!(recs.len(), 1, "the broker kept one copy");
    // A new batch after it still lands.
    p.send(
        &[PartitionRecords {
            partition: 0,
            records: records.to_vec(),
        }],
        deadline(),
    )
    .await
    .unwrap();
    assert_eq!(read_all(&c, &t, 0).await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_over_the_topic_limit_fails_clearly_and_the_next_send_works() {
    let c = client().await;
    let t = topic("big");
    c.create_topic(&t, 1, 1, &[("max.message.bytes", "100000")])
        .await
        .unwrap();
    let p = Producer::new(c.clone(), &t, Compression::None);
    let big = vec![7u8; 200_000];
    let parts: [&[u8]; 1] = [&big];
    let records = vec![Record {
        key: None,
        value_parts: &parts,
        headers: &[],
        timestamp_ms: 0,
    }];
    let err = p
        .send(&[PartitionRecords { partition: 0, records }], deadline())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(10), "{err}");
    assert!(err.to_string().contains("MESSAGE_TOO_LARGE"), "{err}");
    let small: [&[u8]; 1] = [b"small"];
    let records = vec![Record {
        key: None,
        value_parts: &small,
        headers: &[],
        timestamp_ms: 0,
    }];
    p.send(&[PartitionRecords { partition: 0, records }], deadline())
        .await
        .unwrap();
    let recs = read_all(&c, &t, 0).await;
    assert_eq!(recs.len(), 1);
    assert_eq!(&recs[0].value[..], b"small");
}

/// The broker validates compressed batches (it reads every record), so a batch it accepts is
/// one Kafka's own LZ4 and zstd readers decode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_batches_read_back() {
    let c = client().await;
    for (name, compression) in [("lz4", Compression::Lz4), ("zstd", Compression::Zstd(1))] {
        let t = topic(name);
        c.create_topic(&t, 1, 1, &[]).await.unwrap();
        let p = Producer::new(c.clone(), &t, compression);
        // Over 64 KiB of values, so LZ4 writes several blocks.
        let body: Vec<u8> = (0..30_000u32).flat_map(|i| (i % 1000).to_le_bytes()).collect();
        let parts: [&[u8]; 1] = [&body];
        let records = vec![
            Record {
                key: Some(b"t"),
                value_parts: &parts,
                headers: &[],
                timestamp_ms: 5
            };
            3
        ];
        p.send(&[PartitionRecords { partition: 0, records }], deadline())
            .await
            .unwrap();
        let recs = read_all(&c, &t, 0).await;
        assert_eq!(recs.len(), 3, "{name}");
        assert!(recs.iter().all(|r| r.value[..] == body[..]), "{name}");
        let sent = p.stats.bytes.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            sent < body.len() as u64,
            "{name}: {sent} bytes on the wire for 3 × {}",
            body.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_offsets_are_stored_per_group() {
    let c = client().await;
    let t = topic("offsets");
    c.create_topic(&t, 2, 1, &[]).await.unwrap();
    let g = topic("group");
    assert_eq!(c.committed_offsets(&g, &t, &[0, 1]).await.unwrap(), [None, None]);
    c.commit_offsets(&g, &t, &[(0, 42), (1, 7)]).await.unwrap();
    assert_eq!(c.committed_offsets(&g, &t, &[1, 0]).await.unwrap(), [Some(7), Some(42)]);
    c.commit_offsets(&g, &t, &[(1, 8)]).await.unwrap();
    assert_eq!(c.committed_offsets(&g, &t, &[0, 1]).await.unwrap(), [Some(42), Some(8)]);
    assert_eq!(c.committed_offsets(&topic("other"), &t, &[0]).await.unwrap(), [None]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_is_not_there_is_named() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = ClientConfig {
        brokers: vec![format!("127.0.0.1:{port}")],
        request_timeout: Duration::from_secs(2),
        ..Default::default()
    };
    let err = Client::connect(cfg).await.err().expect("no broker");
    assert!(err.to_string().contains(&format!("127.0.0.1:{port}")), "{err}");
}

// ---- TLS and SASL, against the same broker's SASL_SSL and SSL listeners ----

fn tls(ca: &str) -> Tls {
    Tls::new(&TlsOptions {
        ca_file: Some(test_broker().tls_dir.join(ca)),
        ..Default::default()
    })
    .unwrap()
}

fn client_cert_tls() -> Tls {
    let dir = &test_broker().tls_dir;
    Tls::new(&TlsOptions {
        ca_file: Some(dir.join("ca.pem")),
        cert_file: Some(dir.join("client.pem")),
        key_file: Some(dir.join("client-key.pem")),
        ..Default::default()
    })
    .unwrap()
}

fn scram(sha512: bool, password: &str) -> Sasl {
    Sasl::Scram {
        sha512,
        username: "weft".into(),
        password: Secret::new(password),
    }
}

async fn secure_client(addr: &str, security: Security) -> Result<Arc<Client>, Error> {
    Client::connect(ClientConfig {
        brokers: vec![addr.to_string()],
        client_id: "weft-kafka-secure-test".into(),
        request_timeout: Duration::from_secs(5),
        security,
    })
    .await
}

/// Sends one record with `value` to partition 0.
async fn send_one(p: &Producer, value: &[u8]) {
    let parts: [&[u8]; 1] = [value];
    let rec = Record {
        key: Some(b"tenant"),
        value_parts: &parts,
        headers: &[],
        timestamp_ms: 1_700_000_000_000,
    };
    p.send(
        &[PartitionRecords {
            partition: 0,
            records: vec![rec],
        }],
        deadline(),
    )
    .await
    .unwrap();
}

/// A record produced through `c` reads back through the plaintext listener.
async fn round_trip_through(c: Arc<Client>, name: &str) {
    let t = topic(name);
    c.create_topic(&t, 1, 1, &[]).await.unwrap();
    let p = Producer::new(c.clone(), &t, Compression::Lz4);
    let value = format!("through {name}");
    send_one(&p, value.as_bytes()).await;
    let back = read_all(&*client().await, &t, 0).await;
    assert_eq!(back.len(), 1);
    assert_eq!(&back[0].value[..], value.as_bytes());
    // And the secured client reads it too.
    assert_eq!(read_all(&c, &t, 0).await.len(), 1);
}

/// An unsecured JWT (`alg: none`), as the broker's stand-in validator takes: `exp` seconds
/// from now (negative: already expired).
fn unsecured_jwt(exp_in: i64) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let claims = format!(r#"{{"sub":"weft","iat":{},"exp":{}}}"#, now - 60, now + exp_in);
    format!("{}.{}.", b64.encode(br#"{"alg":"none"}"#), b64.encode(claims))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_plain_and_scram_over_tls_produce_and_fetch() {
    let b = test_broker();
    for (name, sasl) in [
        (
            "plain",
            Sasl::Plain {
                username: "weft".into(),
                password: Secret::new("weft-secret"),
            },
        ),
        ("scram256", scram(false, "weft-secret")),
        ("scram512", scram(true, "weft-secret")),
    ] {
        let security = Security {
            tls: Some(tls("ca.pem")),
            sasl: Some(sasl),
        };
        let c = secure_client(&b.sasl_ssl, security)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        round_trip_through(c, name).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauthbearer_tokens_from_a_file_or_a_command() {
    let b = test_broker();
    let dir = tempdir("oauth");
    let file = dir.join("token");
    std::fs::write(&file, unsecured_jwt(3600)).unwrap();
    let from_file = Security {
        tls: Some(tls("ca.pem")),
        sasl: Some(Sasl::OAuthBearer {
            token: TokenSource::File(file.clone()),
        }),
    };
    round_trip_through(secure_client(&b.sasl_ssl, from_file).await.unwrap(), "oauth-file").await;
    let from_command = Security {
        tls: Some(tls("ca.pem")),
        sasl: Some(Sasl::OAuthBearer {
            token: TokenSource::Command(format!("cat {}", file.display())),
        }),
    };
    round_trip_through(secure_client(&b.sasl_ssl, from_command).await.unwrap(), "oauth-cmd").await;

    // Expired: refused before it is sent, naming the file.
    std::fs::write(&file, unsecured_jwt(-30)).unwrap();
    let expired = Security {
        tls: Some(tls("ca.pem")),
        sasl: Some(Sasl::OAuthBearer {
            token: TokenSource::File(file.clone()),
        }),
    };
    let e = secure_client(&b.sasl_ssl, expired).await.err().expect("expired token");
    assert!(matches!(e, Error::Security(_)) && !e.is_retriable(), "{e:?}");
    assert!(
        e.to_string().contains("expired") && e.to_string().contains("token"),
        "{e}"
    );
    // A token the broker refuses (no `sub`): its challenge is in the error.
    std::fs::write(&file, "not-a-jwt").unwrap();
    let refused = Security {
        tls: Some(tls("ca.pem")),
        sasl: Some(Sasl::OAuthBearer {
            token: TokenSource::File(file),
        }),
    };
    let e = secure_client(&b.sasl_ssl, refused).await.err().expect("refused token");
    assert!(e.to_string().contains("OAUTHBEARER authentication"), "{e}");
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_and_mechanisms_are_named() {
    let b = test_broker();
    let wrong = Security {
        tls: Some(tls("ca.pem")),
        sasl: Some(scram(false, "not-the-password")),
    };
    let e = secure_client(&b.sasl_ssl, wrong).await.err().expect("wrong password");
    assert!(matches!(e, Error::Security(_)), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("SCRAM-SHA-256 authentication") && text.contains(&b.sasl_ssl),
        "{text}"
    );
    assert!(text.to_lowercase().contains("invalid credentials"), "{text}");
    // SASL against a listener that takes none.
    let not_sasl = Security {
        tls: Some(client_cert_tls()),
        sasl: Some(scram(true, "weft-secret")),
    };
    let e = secure_client(&b.ssl, not_sasl)
        .await
        .err()
        .expect("no SASL on the SSL listener");
    assert!(!e.is_retriable(), "{e:?}");
    assert!(e.to_string().contains("SASL"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_or_misnamed_certificates_fail_the_handshake_with_the_cause() {
    let b = test_broker();
    let untrusted = Security {
        tls: Some(tls("other-ca.pem")),
        sasl: Some(scram(true, "weft-secret")),
    };
    let e = secure_client(&b.sasl_ssl, untrusted).await.err().expect("untrusted CA");
    assert!(matches!(e, Error::Security(_)), "{e:?}");
    assert!(
        e.to_string().contains("not signed by the CAs of") && e.to_string().contains("other-ca.pem"),
        "{e}"
    );
    let misnamed = Tls::new(&TlsOptions {
        ca_file: Some(b.tls_dir.join("ca.pem")),
        server_name: Some("kafka.example.com".into()),
        ..Default::default()
    })
    .unwrap();
    let e = secure_client(
        &b.sasl_ssl,
        Security {
            tls: Some(misnamed),
            sasl: Some(scram(true, "weft-secret")),
        },
    )
    .await
    .err()
    .expect("wrong name");
    assert!(e.to_string().contains("does not name kafka.example.com"), "{e}");
    // TLS to the plaintext listener.
    let e = secure_client(
        &b.plain,
        Security {
            tls: Some(tls("ca.pem")),
            sasl: None,
        },
    )
    .await
    .err()
    .expect("plaintext port");
    assert!(e.to_string().contains("TLS listener"), "{e}");
    // Skipping verification still encrypts and connects.
    let any = Tls::new(&TlsOptions {
        insecure_skip_verify: true,
        ..Default::default()
    })
    .unwrap();
    let c = secure_client(
        &b.sasl_ssl,
        Security {
            tls: Some(any),
            sasl: Some(scram(true, "weft-secret")),
        },
    )
    .await
    .unwrap();
    round_trip_through(c, "skip-verify").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_needs_the_client_certificate() {
    let b = test_broker();
    let c = secure_client(
        &b.ssl,
        Security {
            tls: Some(client_cert_tls()),
            sasl: None,
        },
    )
    .await
    .unwrap();
    round_trip_through(c, "mtls").await;
    let e = secure_client(
        &b.ssl,
        Security {
            tls: Some(tls("ca.pem")),
            sasl: None,
        },
    )
    .await
    .err()
    .expect("no client certificate");
    assert!(
        e.to_string().contains("refused this client's certificate or wants one"),
        "{e}"
    );
}

/// The broker ends SASL sessions after REAUTH_MS: the client moves to a fresh, authenticated
/// connection before that, and nothing sent in between is lost or doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_renewed_before_the_broker_ends_them() {
    let b = test_broker();
    let c = secure_client(
        &b.sasl_ssl,
        Security {
            tls: Some(tls("ca.pem")),
            sasl: Some(scram(false, "weft-secret")),
        },
    )
    .await
    .unwrap();
    let t = topic("reauth");
    c.create_topic(&t, 1, 1, &[]).await.unwrap();
    let p = Producer::new(c.clone(), &t, Compression::None);
    let opened = c.connections_opened();
    let until = Instant::now() + Duration::from_millis(REAUTH_MS * 2 + 1_000);
    let mut sent = 0u32;
    while Instant::now() < until {
        send_one(&p, &sent.to_be_bytes()).await;
        sent += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        c.connections_opened() >= opened + 2,
        "opened {} connections, {opened} before",
        c.connections_opened()
    );
    let back: Vec<u32> = read_all(&*client().await, &t, 0)
        .await
        .iter()
        .map(|r| u32::from_be_bytes(r.value[..].try_into().unwrap()))
        .collect();
    assert_eq!(back, (0..sent).collect::<Vec<_>>());
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("weft-kafka-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
