# campaign.mk — heed campaign (gen/cmd_campaign.lua, docs/campaigns.md): its
# end-to-end test. Included by the Makefile.

TEST_TARGETS += test-campaign

.PHONY: test-campaign

# Three tiny specs tuned 2 s each through make, GNU parallel and (where a
# one-node cluster starts here, as root) Slurm; a re-run, a killed job,
# gather and --build (tests/campaign/test_campaign.sh). About a minute.
test-campaign: deps
	HEED_ROOT=$(CURDIR) tests/campaign/test_campaign.sh
