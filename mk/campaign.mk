# campaign.mk — heed campaign (cli/cmd_campaign.lua, docs/campaigns.md): its
# end-to-end test. Included by the Makefile.

TEST_TARGETS += test-campaign

.PHONY: test-campaign

# Three tiny specs tuned 2 s each through make, GNU parallel and (where a
# one-node cluster starts here, as root) Slurm; a re-run, a killed job,
# gather, --build, and libheed planning from the gathered wisdom as system
# wisdom (tests/campaign/test_campaign.sh). About two minutes.
$(B)/campaign/plan: tests/campaign/plan.c $(B)/libheed.a runtime/heed.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Iruntime tests/campaign/plan.c $(B)/libheed.a $(RT_LIBS) -o $@

test-campaign: deps $(B)/campaign/plan
	HEED_ROOT=$(CURDIR) PLAN=$(CURDIR)/$(B)/campaign/plan tests/campaign/test_campaign.sh
