package kmirror.test;

import java.net.URI;
import java.net.URLDecoder;
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.Base64;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import javax.security.auth.callback.Callback;
import javax.security.auth.callback.UnsupportedCallbackException;
import javax.security.auth.login.AppConfigurationEntry;
import org.apache.kafka.common.security.auth.AuthenticateCallbackHandler;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerExtensionsValidatorCallback;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerToken;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallback;

/**
 * A broker-side validator of MSK IAM tokens for the tests (issue 45): the token is a base64url
 * SigV4-presigned GET of https://kafka.REGION.amazonaws.com/?Action=kafka-cluster:Connect. It checks
 * the action, the region and service in the credential scope, the expiry (X-Amz-Date + X-Amz-Expires)
 * and the signature, recomputed with the secret key of the test's fake access key (JAAS options
 * accessKey, secretKey, region). The principal is the access key id. Not AWS's code: what an MSK
 * broker checks, as far as a signature made with a known key can be checked offline.
 */
public class MskIamTestValidator implements AuthenticateCallbackHandler {
    private static final DateTimeFormatter AMZ_DATE = DateTimeFormatter.ofPattern("yyyyMMdd'T'HHmmss'Z'");
    private String accessKey;
    private String secretKey;
    private String region;

    @Override
    public void configure(Map<String, ?> configs, String mechanism, List<AppConfigurationEntry> entries) {
        Map<String, ?> options = entries.get(0).getOptions();
        accessKey = (String) options.get("accessKey");
        secretKey = (String) options.get("secretKey");
        region = (String) options.get("region");
    }

    @Override
    public void close() {}

    @Override
    public void handle(Callback[] callbacks) throws UnsupportedCallbackException {
        for (Callback callback : callbacks) {
            if (callback instanceof OAuthBearerValidatorCallback validator) {
                validate(validator);
            } else if (callback instanceof OAuthBearerExtensionsValidatorCallback extensions) {
                extensions.inputExtensions().map().keySet().forEach(extensions::valid);
            } else {
                throw new UnsupportedCallbackException(callback);
            }
        }
    }

    private static String encode(String s) {
        return URLEncoder.encode(s, StandardCharsets.UTF_8).replace("+", "%20").replace("*", "%2A").replace("%7E", "~");
    }

    private static byte[] hmac(byte[] key, String data) throws Exception {
        Mac mac = Mac.getInstance("HmacSHA256");
        mac.init(new SecretKeySpec(key, "HmacSHA256"));
        return mac.doFinal(data.getBytes(StandardCharsets.UTF_8));
    }

    private static String sha256(String data) throws Exception {
        return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(data.getBytes(StandardCharsets.UTF_8)));
    }

    private void validate(OAuthBearerValidatorCallback callback) {
        try {
            String url = new String(Base64.getUrlDecoder().decode(callback.tokenValue()), StandardCharsets.UTF_8);
            URI uri = URI.create(url);
            TreeMap<String, String> params = new TreeMap<>();
            for (String pair : uri.getRawQuery().split("&")) {
                String[] kv = pair.split("=", 2);
                params.put(URLDecoder.decode(kv[0], StandardCharsets.UTF_8),
                           kv.length > 1 ? URLDecoder.decode(kv[1], StandardCharsets.UTF_8) : "");
            }
            if (!"kafka-cluster:Connect".equals(params.get("Action"))) {
                callback.error("invalid_token", null, null);
                return;
            }
            String[] credential = params.get("X-Amz-Credential").split("/");
            if (!credential[0].equals(accessKey) || !credential[2].equals(region) || !credential[3].equals("kafka-cluster")
                    || !uri.getHost().equals("kafka." + region + ".amazonaws.com")) {
                callback.error("invalid_token", null, null);
                return;
            }
            long signedMs = LocalDateTime.parse(params.get("X-Amz-Date"), AMZ_DATE).toInstant(ZoneOffset.UTC).toEpochMilli();
            long expiresMs = signedMs + Long.parseLong(params.get("X-Amz-Expires")) * 1000;
            if (System.currentTimeMillis() > expiresMs) {
                callback.error("invalid_token", null, null);
                return;
            }
            StringBuilder query = new StringBuilder();
            for (Map.Entry<String, String> e : params.entrySet()) {
                if (e.getKey().equals("X-Amz-Signature") || e.getKey().equals("User-Agent")) continue;
                if (query.length() > 0) query.append('&');
                query.append(encode(e.getKey())).append('=').append(encode(e.getValue()));
            }
            String canonical = String.join("\n", "GET", "/", query.toString(), "host:" + uri.getHost() + "\n", "host", sha256(""));
            String scope = String.join("/", credential[1], credential[2], credential[3], credential[4]);
            String toSign = String.join("\n", "AWS4-HMAC-SHA256", params.get("X-Amz-Date"), scope, sha256(canonical));
            byte[] key = ("AWS4" + secretKey).getBytes(StandardCharsets.UTF_8);
            for (String part : scope.split("/")) key = hmac(key, part);
            String signature = HexFormat.of().formatHex(hmac(key, toSign));
            if (!MessageDigest.isEqual(signature.getBytes(StandardCharsets.UTF_8),
                                       params.get("X-Amz-Signature").getBytes(StandardCharsets.UTF_8))) {
                callback.error("invalid_token", null, null);
                return;
            }
            String value = callback.tokenValue();
            String principal = credential[0];
            callback.token(new OAuthBearerToken() {
                public String value() { return value; }
                public Set<String> scope() { return Set.of(); }
                public long lifetimeMs() { return expiresMs; }
                public String principalName() { return principal; }
                public Long startTimeMs() { return signedMs; }
            });
        } catch (Exception e) {
            callback.error("invalid_token", null, null);
        }
    }
}
