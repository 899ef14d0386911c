// Starts DynamoDB Local bound to 127.0.0.1 only.
//
// DynamoDB Local has no bind option: its Jetty server listens on every interface. This
// launcher builds the server through DynamoDB Local's own command-line parser, sets the host
// of each Jetty connector to the loopback address, then starts it. It takes the same
// arguments as DynamoDBLocal.jar (-inMemory -sharedDb -disableTelemetry -port N).
import java.lang.reflect.Field;
import org.eclipse.jetty.server.Connector;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import software.amazon.dynamodb.services.local.main.ServerRunner;
import software.amazon.dynamodb.services.local.server.DynamoDBProxyServer;

public final class DynamoDbLocalLauncher {
    public static void main(String[] args) throws Exception {
        DynamoDBProxyServer proxy = ServerRunner.createServerFromCommandLineArgs(args);
        Field field = DynamoDBProxyServer.class.getDeclaredField("server");
        field.setAccessible(true);
        Server server = (Server) field.get(proxy);
        int bound = 0;
        for (Connector connector : server.getConnectors()) {
            if (connector instanceof ServerConnector) {
                ((ServerConnector) connector).setHost("127.0.0.1");
                bound++;
            }
        }
        if (bound == 0) {
            throw new IllegalStateException("no Jetty ServerConnector found to bind to 127.0.0.1");
        }
        // Throws, and the JVM exits without the line below, when the port cannot be bound.
        proxy.start();
        // Printed only by the process that bound the port: a caller waiting for this line
        // knows that what answers on the port is this DynamoDB Local, not another listener.
        for (Connector connector : server.getConnectors()) {
            if (connector instanceof ServerConnector) {
                System.out.println("DynamoDB Local listening on 127.0.0.1:"
                        + ((ServerConnector) connector).getLocalPort());
            }
        }
        System.out.flush();
        proxy.join();
    }
}
