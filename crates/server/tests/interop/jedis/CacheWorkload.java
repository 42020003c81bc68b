// A cache workload through Jedis (redis.clients:jedis 5, pom.xml) with its defaults: a pool
// (JedisPooled), SET with a TTL, GET, MGET, INCR, DEL, EXPIRE, a pipeline, SCAN, the client's
// errors, and AUTH when QS_PASSWORD is set; over TLS, trusting the CA in QS_TLS_CA, when that
// is set; in RESP3 (HELLO 3) when QS_PROTOCOL is 3. Exits non-zero on the first reply that is
// not what a Redis server answers.
//
//     java -cp "$(cat target/classpath.txt)" CacheWorkload.java 6379

import java.io.FileInputStream;
import java.security.KeyStore;
import java.security.cert.CertificateFactory;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLSocketFactory;
import javax.net.ssl.TrustManagerFactory;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.JedisPooled;
import redis.clients.jedis.Pipeline;
import redis.clients.jedis.RedisProtocol;
import redis.clients.jedis.Response;
import redis.clients.jedis.exceptions.JedisDataException;
import redis.clients.jedis.params.ScanParams;
import redis.clients.jedis.params.SetParams;
import redis.clients.jedis.resps.ScanResult;

public class CacheWorkload {
    static void check(String what, boolean ok, Object got) {
        if (!ok) {
            System.err.println(what + ": got " + got);
            System.exit(1);
        }
    }

    /// A socket factory that trusts only the PEM certificate at `path`.
    static SSLSocketFactory trusting(String path) throws Exception {
        KeyStore store = KeyStore.getInstance(KeyStore.getDefaultType());
        store.load(null, null);
        try (FileInputStream in = new FileInputStream(path)) {
            store.setCertificateEntry("ca", CertificateFactory.getInstance("X.509").generateCertificate(in));
        }
        TrustManagerFactory trust = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        trust.init(store);
        SSLContext context = SSLContext.getInstance("TLS");
        context.init(null, trust.getTrustManagers(), null);
        return context.getSocketFactory();
    }

    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        String password = System.getenv().getOrDefault("QS_PASSWORD", "");
        String ca = System.getenv().getOrDefault("QS_TLS_CA", "");
        DefaultJedisClientConfig.Builder config = DefaultJedisClientConfig.builder().timeoutMillis(10_000);
        if (!password.isEmpty()) {
            config.password(password);
        }
        if ("3".equals(System.getenv("QS_PROTOCOL"))) {
            config.protocol(RedisProtocol.RESP3);
        }
        if (!ca.isEmpty()) {
            // The server's certificate names localhost.
            config.ssl(true).sslSocketFactory(trusting(ca));
        }
        String host = ca.isEmpty() ? "127.0.0.1" : "localhost";
        try (JedisPooled jedis = new JedisPooled(new HostAndPort(host, port), config.build())) {
            run(jedis);
        }
    }

    static void run(JedisPooled jedis) {
        check("PING", jedis.ping().equals("PONG"), jedis.ping());
        check("SET EX", "OK".equals(jedis.set("session:1", "alice", SetParams.setParams().ex(60))), null);
        check("GET", "alice".equals(jedis.get("session:1")), jedis.get("session:1"));
        long ttl = jedis.ttl("session:1");
        check("TTL", ttl > 50 && ttl <= 60, ttl);
        check("GET of a missing key", jedis.get("missing") == null, jedis.get("missing"));
        check("SET NX of a present key", jedis.set("session:1", "bob", SetParams.setParams().nx()) == null, null);
        check("SETEX", "OK".equals(jedis.setex("short", 100, "x")), null);

        check("MSET", "OK".equals(jedis.mset("a{u}", "1", "b{u}", "2")), null);
        List<String> values = jedis.mget("a{u}", "missing", "b{u}");
        check("MGET", values.equals(Arrays.asList("1", null, "2")), values);

        check("INCR", jedis.incr("counter") == 1, null);
        check("INCRBY", jedis.incrBy("counter", 41) == 42, null);
        check("DECR", jedis.decr("counter") == 41, null);
        check("DECRBY", jedis.decrBy("counter", 50) == -9, null);
        check("GET of a counter", "-9".equals(jedis.get("counter")), jedis.get("counter"));
        try {
            jedis.incr("session:1");
            check("INCR of text", false, "no error");
        } catch (JedisDataException error) {
            check("INCR of text", error.getMessage().contains("not an integer"), error.getMessage());
        }

        check("EXPIRE", jedis.expire("counter", 3600) == 1, null);
        check("PERSIST", jedis.persist("counter") == 1, null);
        check("TTL after PERSIST", jedis.ttl("counter") == -1, jedis.ttl("counter"));
        check("EXISTS", jedis.exists("a{u}", "missing", "b{u}") == 2, null);
        check("DEL", jedis.del("a{u}", "b{u}", "missing") == 2, null);
        check("APPEND", jedis.append("session:1", "!") == 6, null);
        check("STRLEN", jedis.strlen("session:1") == 6, null);

        // A pipeline (no MULTI): every reply in order.
        List<Response<String>> gets = new ArrayList<>();
        try (Pipeline pipe = jedis.pipelined()) {
            for (int i = 0; i < 100; i++) {
                pipe.set("page:" + i, "<p>" + i + "</p>", SetParams.setParams().px(600_000));
            }
            for (int i = 0; i < 100; i++) {
                gets.add(pipe.get("page:" + i));
            }
            pipe.sync();
        }
        for (int i = 0; i < 100; i++) {
            check("pipelined GET", ("<p>" + i + "</p>").equals(gets.get(i).get()), gets.get(i).get());
        }

        Set<String> seen = new HashSet<>();
        String cursor = ScanParams.SCAN_POINTER_START;
        do {
            ScanResult<String> page = jedis.scan(cursor, new ScanParams().match("page:*").count(10));
            seen.addAll(page.getResult());
            cursor = page.getCursor();
        } while (!cursor.equals(ScanParams.SCAN_POINTER_START));
        check("SCAN saw every page", seen.size() == 100, seen.size());

        check("GETDEL", "<p>7</p>".equals(jedis.getDel("page:7")), null);
        check("GETDEL again", jedis.getDel("page:7") == null, null);
        check("DBSIZE", jedis.dbSize() == 102, jedis.dbSize());
        check("FLUSHALL", "OK".equals(jedis.flushAll()), null);
        check("DBSIZE after FLUSHALL", jedis.dbSize() == 0, jedis.dbSize());
    }
}
