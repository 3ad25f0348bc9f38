// Checks a live krabka-authority service through the Go client that
// oapi-codegen generates from openapi/openapi.yaml (client.gen.go, beside
// this file once generated): a single and a batch check, each with an
// authoritative token, a superseded one and a malformed one (400). Run by
// tests/broker/clients/go.rs.
//
// usage: contract-check URL ROLE AUTHORITATIVE SUPERSEDED
package main

import (
	"context"
	"fmt"
	"os"
	"time"
)

func expect(what string, ok bool, got any) {
	if !ok {
		fmt.Printf("FAILED %s: %+v\n", what, got)
		os.Exit(1)
	}
	fmt.Printf("ok %s\n", what)
}

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: contract-check URL ROLE AUTHORITATIVE SUPERSEDED")
		os.Exit(2)
	}
	url, role, good, old := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client, err := NewClientWithResponses(url)
	if err != nil {
		fmt.Printf("FAILED making the client: %v\n", err)
		os.Exit(1)
	}

	r, err := client.CheckAuthorityWithResponse(ctx, role, &CheckAuthorityParams{Token: good})
	expect("single authoritative is a typed 200", err == nil && r.StatusCode() == 200 && r.JSON200 != nil, r)
	a := r.JSON200
	expect("its verdict, token, current pair and cluster",
		a.Verdict == CheckAuthority200JSONResponseBodyVerdictAuthoritative && a.Token == good &&
			a.Current != nil && *a.Current == good && a.Role == role && !a.Cached && a.Cluster != "", a)

	r, err = client.CheckAuthorityWithResponse(ctx, role, &CheckAuthorityParams{Token: old})
	expect("single superseded is a typed 409", err == nil && r.StatusCode() == 409 && r.JSON409 != nil, r)
	s := r.JSON409
	expect("it names the current pair, which superseded the token",
		s.Verdict == CheckAuthority409JSONResponseBodyVerdictSuperseded && s.Token == old &&
			s.Current != nil && *s.Current == good && s.SupersededBy != nil && s.SupersededBy.Pair == good, s)

	r, err = client.CheckAuthorityWithResponse(ctx, role, &CheckAuthorityParams{Token: "1:-1"})
	expect("single malformed token is a typed 400",
		err == nil && r.StatusCode() == 400 && r.ApplicationproblemJSON400 != nil, r)
	p := r.ApplicationproblemJSON400
	expect("the problem names the field", p.Field == "token" && p.Status == 400 && p.Detail != "", p)

	str := func(s string) *string { return &s }
	b, err := client.CheckAuthorityBatchWithResponse(ctx, CheckRequest{
		{Role: str(role), Token: str(good)},
		{Role: str(role), Token: str(old)},
		{Role: str(role), Token: str("nope")},
	})
	expect("batch is a typed 200", err == nil && b.StatusCode() == 200 && b.JSON200 != nil &&
		len(b.JSON200.Results) == 3, b)
	first, err1 := b.JSON200.Results[0].AsBatchVerdict()
	expect("batch item 1 authoritative", err1 == nil && first.Status == 200 &&
		first.Verdict == VerdictAuthoritative && first.Current != nil && *first.Current == good, first)
	second, err2 := b.JSON200.Results[1].AsBatchVerdict()
	// Answered from the service's cache by now: no current pair, the
	// pair that superseded it.
	expect("batch item 2 superseded", err2 == nil && second.Status == 409 &&
		second.Verdict == VerdictSuperseded && second.SupersededBy != nil && second.SupersededBy.Pair == good, second)
	third, err3 := b.JSON200.Results[2].AsBatchProblem()
	expect("batch item 3 a 400 problem", err3 == nil && third.Status == 400 &&
		third.Problem.Field != nil && *third.Problem.Field == "token" &&
		third.Token != nil && *third.Token == "nope", third)
}
