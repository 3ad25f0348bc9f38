// Checks a live krabka-authority service through the Java client that
// openapi-generator generates from openapi/openapi.yaml (pom.xml beside
// this file): a single and a batch check, each with an authoritative token,
// a superseded one and a malformed one (400). Run by
// tests/broker/clients/java.rs.
//
// usage: java ContractCheck URL ROLE AUTHORITATIVE SUPERSEDED

import io.krabka.authority.client.ApiClient;
import io.krabka.authority.client.ApiException;
import io.krabka.authority.client.api.AuthorityApi;
import io.krabka.authority.client.model.BatchProblem;
import io.krabka.authority.client.model.BatchResponse;
import io.krabka.authority.client.model.BatchVerdict;
import io.krabka.authority.client.model.CheckAuthority200Response;
import io.krabka.authority.client.model.CheckAuthority409Response;
import io.krabka.authority.client.model.CheckItem;
import io.krabka.authority.client.model.InvalidProblem;
import io.krabka.authority.client.model.Verdict;
import java.util.List;
import java.util.Objects;

public final class ContractCheck {
  private ContractCheck() {}

  static void expect(String what, boolean ok, Object got) {
    if (!ok) {
      System.out.println("FAILED " + what + ": " + got);
      System.exit(1);
    }
    System.out.println("ok " + what);
  }

  /** The status and typed body of an answer the client throws for (4xx). */
  static <T> T problem(ApiClient client, ApiException e, int status, Class<T> type)
      throws Exception {
    if (e.getCode() != status) {
      expect("answered " + status, false, e.getCode() + " " + e.getResponseBody());
    }
    return client.getObjectMapper().readValue(e.getResponseBody(), type);
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 4) {
      System.err.println("usage: ContractCheck URL ROLE AUTHORITATIVE SUPERSEDED");
      System.exit(2);
    }
    String url = args[0], role = args[1], good = args[2], old = args[3];
    ApiClient client = new ApiClient();
    client.updateBaseUri(url);
    AuthorityApi api = new AuthorityApi(client);

    CheckAuthority200Response a = api.checkAuthority(role, good);
    expect("single authoritative is a typed 200", a != null, a);
    expect("its verdict, token, current pair and cluster",
        a.getVerdict() == CheckAuthority200Response.VerdictEnum.AUTHORITATIVE
            && good.equals(a.getToken()) && good.equals(a.getCurrent())
            && role.equals(a.getRole()) && Boolean.FALSE.equals(a.getCached())
            && a.getCluster() != null && !a.getCluster().isEmpty(), a);

    try {
      api.checkAuthority(role, old);
      expect("single superseded is a typed 409", false, "a 200");
    } catch (ApiException e) {
      CheckAuthority409Response s = problem(client, e, 409, CheckAuthority409Response.class);
      expect("single superseded is a typed 409", s != null, s);
      expect("it names the current pair, which superseded the token",
          s.getVerdict() == CheckAuthority409Response.VerdictEnum.SUPERSEDED
              && old.equals(s.getToken()) && good.equals(s.getCurrent())
              && s.getSupersededBy() != null && good.equals(s.getSupersededBy().getPair()), s);
    }

    try {
      api.checkAuthority(role, "1:-1");
      expect("single malformed token is a typed 400", false, "a 200");
    } catch (ApiException e) {
      InvalidProblem p = problem(client, e, 400, InvalidProblem.class);
      expect("single malformed token is a typed 400", p != null, p);
      expect("the problem names the field",
          "token".equals(p.getField()) && p.getStatus() == InvalidProblem.StatusEnum.NUMBER_400
              && p.getDetail() != null && !p.getDetail().isEmpty(), p);
    }

    BatchResponse b = api.checkAuthorityBatch(List.of(
        new CheckItem().role(role).token(good),
        new CheckItem().role(role).token(old),
        new CheckItem().role(role).token("nope")));
    expect("batch is a typed 200", b != null && b.getResults().size() == 3, b);
    Object first = b.getResults().get(0).getActualInstance();
    expect("batch item 1 authoritative", first instanceof BatchVerdict v
        && v.getStatus() == BatchVerdict.StatusEnum.NUMBER_200
        && v.getVerdict() == Verdict.AUTHORITATIVE && good.equals(v.getCurrent()), first);
    Object second = b.getResults().get(1).getActualInstance();
    expect("batch item 2 superseded", second instanceof BatchVerdict v
        && v.getStatus() == BatchVerdict.StatusEnum.NUMBER_409
        && v.getVerdict() == Verdict.SUPERSEDED && v.getSupersededBy() != null
        && good.equals(v.getSupersededBy().getPair()), second);
    Object third = b.getResults().get(2).getActualInstance();
    expect("batch item 3 a 400 problem", third instanceof BatchProblem p
        && p.getStatus() == BatchProblem.StatusEnum.NUMBER_400
        && "token".equals(p.getProblem().getField()) && Objects.equals(p.getToken(), "nope"), third);
  }
}
