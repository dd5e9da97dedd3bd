// NkMongoJavaServer: runs mongo-java-server 1.47.0 (in-memory backend) on loopback as
// natural-key's second test engine.
//
//   java -jar nk-mongo-java-server.jar --listen 127.0.0.1:PORT --uri-file FILE [--replica-set NAME]
//
// PORT 0 picks a free port. FILE gets the MongoDB URI once the socket is bound (written to a
// temp file, then renamed). Everything lives in memory and goes away with the process.
//
// THE WIRE VERSION IS REWRITTEN: mongo-java-server answers isMaster with maxWireVersion 8
// (MongoDB 4.2) and the Rust driver 3.x refuses anything below 9 (MongoDB 4.4). The server
// implements 4.2-era commands; natural-key relies on nothing newer, so this launcher reports 9.
// It does so in a MemoryBackend subclass that answers isMaster/ismaster itself (below); every
// other command, `hello` included, goes to the stock backend unchanged. In particular the
// launcher does not add `hello` or `helloOk`: the driver keeps to the legacy isMaster
// handshake and natural-key's detection meets the engine as shipped (docs/engines.md).
//
// --replica-set NAME makes isMaster present the server as the primary of a one-member replica set
// (setName, hosts, primary, me), so a driver connected with replicaSet=NAME sees a
// ReplicaSetWithPrimary topology and sends $readPreference on the wire for non-primary reads.
// It is not a replica set: there is no oplog-backed replication, no elections, no transactions.
// isMaster also reports logicalSessionTimeoutMinutes so drivers start sessions; the server ignores
// lsid, txnNumber, $readPreference and writeConcern fields in commands.

import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.List;
import java.util.concurrent.CountDownLatch;

import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;
import de.bwaldvogel.mongo.bson.Document;
import io.netty.channel.Channel;

public final class NkMongoJavaServer {

    /** MongoDB 4.4: the Rust driver 3.x floor. */
    static final int REPORTED_MAX_WIRE_VERSION = 9;

    /** MemoryBackend that answers isMaster / ismaster with wire version 9 (+ replica set). */
    static final class Backend extends MemoryBackend {
        private final String replicaSet; // null: standalone
        private volatile String address; // "127.0.0.1:PORT", set once bound

        Backend(String replicaSet) {
            this.replicaSet = replicaSet;
        }

        @Override
        public Document handleCommand(Channel channel, String db, String command, Document query) {
            if (!command.equalsIgnoreCase("ismaster")) {
                return super.handleCommand(channel, db, command, query);
            }
            Document base = super.handleCommand(channel, db, "ismaster", query);
            Document reply = new Document("ismaster", Boolean.TRUE);
            if (replicaSet != null) {
                reply.put("setName", replicaSet);
                reply.put("setVersion", 1);
                reply.put("hosts", List.of(address));
                reply.put("primary", address);
                reply.put("me", address);
                reply.put("secondary", Boolean.FALSE);
            }
            for (String key : List.of("maxBsonObjectSize", "maxMessageSizeBytes", "maxWriteBatchSize", "localTime")) {
                reply.put(key, base.get(key));
            }
            reply.put("logicalSessionTimeoutMinutes", 30);
            reply.put("minWireVersion", base.get("minWireVersion"));
            reply.put("maxWireVersion", REPORTED_MAX_WIRE_VERSION); // rewritten: see the file header
            reply.put("readOnly", Boolean.FALSE);
            reply.put("ok", 1.0);
            return reply;
        }
    }

    public static void main(String[] args) throws Exception {
        // slf4j-simple: warnings and errors only, to stderr (override with -D...defaultLogLevel=info).
        if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null) {
            System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        }
        String listen = "127.0.0.1:0";
        String uriFile = null;
        String replicaSet = null;
        for (int i = 0; i < args.length; i++) {
            String value = i + 1 < args.length ? args[i + 1] : null;
            switch (args[i]) {
                case "--listen" -> listen = need(args[i], value);
                case "--uri-file" -> uriFile = need(args[i], value);
                case "--replica-set" -> replicaSet = need(args[i], value);
                default -> fail("unknown argument: " + args[i]);
            }
            i++;
        }
        int colon = listen.lastIndexOf(':');
        if (colon < 0 || !listen.substring(0, colon).equals("127.0.0.1")) {
            fail("refusing to listen on " + listen + ": only 127.0.0.1:PORT");
        }
        int port = Integer.parseInt(listen.substring(colon + 1));

        Backend backend = new Backend(replicaSet);
        MongoServer server = new MongoServer(backend);
        try {
            server.bind("127.0.0.1", port);
        } catch (Exception e) { // e.g. address in use (netty rethrows it unchecked); its threads would keep us alive
            fail("cannot listen on " + listen + ": " + e);
        }
        InetSocketAddress bound = server.getLocalAddress();
        backend.address = "127.0.0.1:" + bound.getPort();
        Runtime.getRuntime().addShutdownHook(new Thread(server::shutdownNow));

        String uri = "mongodb://" + backend.address + "/" + (replicaSet != null ? "?replicaSet=" + replicaSet : "");
        if (uriFile != null) {
            Path target = Path.of(uriFile);
            Path tmp = Path.of(uriFile + ".tmp");
            Files.writeString(tmp, uri + "\n", StandardCharsets.UTF_8);
            Files.move(tmp, target, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        }
        System.err.println("nk-mongo-java-server: listening, " + uri);
        new CountDownLatch(1).await(); // until killed
    }

    private static String need(String flag, String value) {
        if (value == null) {
            fail(flag + " needs a value");
        }
        return value;
    }

    private static void fail(String message) {
        System.err.println("nk-mongo-java-server: " + message);
        System.exit(2);
    }
}
