"""Regenerate the sample ticket exports: `python data/generate_tickets.py`.

Writes `data/tickets/<day>.jsonl`, one export per day (7 days, about 300 tickets each), and
`data/tickets_eval.jsonl`, a separate labelled evaluation set drawn with another seed (none
of its tickets is one of the taxonomy's examples). Tickets for Relay, the product of the
sample handbook, vary their wording: paraphrases, casual and formal openings, typos, and
tickets that mention a second topic (labelled with the first). Each daily export also holds a
few bad rows (a missing body, an unparseable date, a repeated id) to show how they are
recorded. The output is deterministic (fixed seeds) and committed, so the demo never depends
on this script.
"""

import json
import random
from datetime import date, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "tickets"
EVAL = HERE / "tickets_eval.jsonl"
FIRST_DAY = date(2026, 11, 23)
DAYS = 7
PER_DAY = 300

PLANS = ["Starter", "Team", "Business", "Enterprise"]
TOOLS = ["Slack", "Jira", "Salesforce", "GitHub", "Google Calendar", "Microsoft 365", "Zapier"]
MONTHS = ["January", "March", "June", "September", "October", "November"]

# intent -> (subjects, bodies); {plan}, {plan2}, {tool}, {month}, {n} are filled in
TEMPLATES: dict[str, tuple[list[str], list[str]]] = {
    "password_reset": (
        ["Can't log in", "Password reset", "Locked out of my account", "forgot password"],
        [
            "I can't remember my password and the sign-in page won't let me in.",
            "I requested a password reset three times but no email shows up.",
            "The reset link I got says it is invalid or expired.",
            "How do I reset my password? I haven't logged in for months.",
            "my password isn't accepted anymore, I need to set a new one",
            "After the update my old password stopped working, please help me reset it.",
        ],
    ),
    "two_factor_auth": (
        ["2FA problem", "Lost my phone", "Two-factor codes not working", "authenticator"],
        [
            "I got a new phone and my authenticator app no longer has the Relay codes.",
            "The six digit codes from my authenticator are always rejected.",
            "I lost my recovery codes and I'm locked out by two-factor authentication.",
            "Can an admin turn off 2FA for me? My phone was stolen.",
            "the security key I registered for two factor login is not recognised",
            "Where can I see my backup codes for two-step verification?",
        ],
    ),
    "refund_request": (
        ["Refund please", "Money back", "Refund for unused months", "request a refund"],
        [
            "We cancelled in {month} but were still charged, can we get that refunded?",
            "I bought the yearly {plan} plan by accident and would like a refund.",
            "Please give us our money back for the months we did not use.",
            "Is it possible to get a partial refund after downgrading?",
            "i'd like a refund, the product did not work for our team",
            "Could you credit back the last payment? We stopped using Relay weeks ago.",
        ],
    ),
    "duplicate_charge": (
        ["Charged twice", "Double payment", "Duplicate charge on card", "billed two times"],
        [
            "I see two identical charges from Relay on my credit card statement for {month}.",
            "We were billed twice for the {plan} plan this month.",
            "My bank shows a second payment to Relay right after the first one.",
            "Why was my card charged again when the invoice was already paid?",
            "there is a duplicate transaction on our company card, please check",
            "You took the subscription fee two times on the same day.",
        ],
    ),
    "plan_change": (
        ["Upgrade plan", "Downgrade", "Change of plan", "switch to {plan2}"],
        [
            "We would like to move from {plan} to {plan2}, how does that work?",
            "How can I upgrade our workspace to the {plan2} plan?",
            "Our team got smaller, we want to downgrade from {plan} to {plan2}.",
            "Can we change from monthly to annual billing on the {plan} plan?",
            "what happens to our data if we switch down to the {plan2} tier?",
            "Please change our subscription to {plan2} starting next month.",
        ],
    ),
    "cancel_subscription": (
        ["Cancel subscription", "Stop renewal", "Cancellation", "end our contract"],
        [
            "Please cancel our Relay subscription at the end of this billing period.",
            "How do I stop the automatic renewal of the {plan} plan?",
            "We are moving to another tool and want to end our subscription.",
            "I want to cancel, where is the cancel button?",
            "our company is shutting down so please stop charging us and close the plan",
            "Do not renew our annual contract in {month}.",
        ],
    ),
    "invoice_request": (
        ["Invoice needed", "Receipt request", "VAT number on invoice", "billing documents"],
        [
            "Could you send me the invoice for {month}? Our accountant needs it.",
            "I need a receipt that shows our company name and VAT ID.",
            "Where can I download all invoices from last year?",
            "Please add our tax number to the invoices going forward.",
            "the invoice has the wrong billing address, can you reissue it",
            "Our finance team needs PDF copies of every invoice since {month}.",
        ],
    ),
    "payment_method_update": (
        ["Update credit card", "Card declined", "New payment method", "change card"],
        [
            "My credit card expired, how do I put the new card on file?",
            "Our payment was declined, can we pay by bank transfer instead?",
            "I'd like to switch the payment method from card to invoice.",
            "How do I change the card that Relay charges each month?",
            "the card on the account belongs to an employee who left, need to replace it",
            "Can we pay with PayPal or SEPA direct debit?",
        ],
    ),
    "outage_report": (
        ["Relay is down", "500 errors", "Nothing loads", "URGENT outage"],
        [
            "Relay is not loading for anyone in our office since 9am.",
            "We keep getting a 500 internal server error when opening tickets.",
            "The app is extremely slow and messages take minutes to appear.",
            "Is there an outage? The status page says all good but nothing works.",
            "site down?? whole team gets a blank page",
            "Messages fail to send with a 'service unavailable' error.",
        ],
    ),
    "data_export": (
        ["Export data", "Download our messages", "Backup request", "CSV export"],
        [
            "How do I export all messages and files from our workspace?",
            "We need a CSV export of every ticket from {month} onwards.",
            "Can we get a full backup of our Relay data before the contract ends?",
            "Is there a way to download the chat history of a channel?",
            "need to export our help desk tickets to move them into a data warehouse",
            "Please send us an archive of all workspace data.",
        ],
    ),
    "account_deletion": (
        ["Delete my account", "GDPR erasure request", "Remove my data", "close my account"],
        [
            "Please delete my account and every piece of personal data you hold.",
            "Under GDPR I request the erasure of all my data.",
            "How can I permanently delete my Relay profile?",
            "I no longer use Relay, remove my account completely.",
            "i want my personal information wiped from your systems",
            "Close my user account for good, I don't want it kept anywhere.",
        ],
    ),
    "integration_issue": (
        ["{tool} integration broken", "Sync not working", "{tool} not syncing", "integration"],
        [
            "The {tool} integration stopped syncing two days ago.",
            "Nothing from {tool} shows up in Relay anymore, the connection looks fine.",
            "We reconnected {tool} but the sync still fails with an error.",
            "Our {tool} import stopped halfway through.",
            "updates made in {tool} do not appear in relay, is the integration broken?",
            "Since yesterday the {tool} connector keeps disconnecting itself.",
        ],
    ),
    "api_rate_limit": (
        ["API 429 errors", "Rate limit", "API quota", "Too Many Requests"],
        [
            "Our integration gets HTTP 429 Too Many Requests from your API.",
            "What are the rate limits of the REST API? We keep hitting them.",
            "Can you raise the API request quota for our workspace?",
            "The API throttles us after {n} requests per minute.",
            "our script gets rate limited by the messages endpoint, how many calls are allowed",
            "We need a higher API limit for a nightly sync job.",
        ],
    ),
    "seat_management": (
        ["Add users", "More seats", "Remove a member", "licences"],
        [
            "How do I add {n} more seats to our {plan} plan?",
            "I need to remove a user who left the company.",
            "Can we invite contractors without paying for a full seat?",
            "Please deactivate these members and free up their licences.",
            "we hired new people, how do I give them access to relay",
            "How are we billed when we add users in the middle of the month?",
        ],
    ),
    "email_change": (
        ["Change email", "New login email", "Update my email address", "email address"],
        [
            "How do I change the email address I use to log in?",
            "Our company moved to a new domain, I need to update my account email.",
            "Please change my login from my old address to my new one.",
            "I no longer have access to the email on my account, can you change it?",
            "can i switch my account over to my personal email",
            "The confirmation link for my new email address never arrives.",
        ],
    ),
}

OPENINGS = ["", "", "", "Hi, ", "Hello team, ", "Hey there. ", "Good morning, ", "Hi support, "]
CLOSINGS = ["", "", "", " Thanks!", " Thank you.", " Regards, Sam", " Cheers", " Please help."]
CHANNELS = ["email", "email", "chat", "web", "phone"]


def _typo(text: str, rng: random.Random) -> str:
    """Swap two neighbouring letters in one or two longer words."""
    words = text.split(" ")
    for _ in range(rng.choice([1, 2])):
        i = rng.randrange(len(words))
        word = words[i]
        if len(word) > 4 and word.isalpha():
            j = rng.randrange(1, len(word) - 2)
            words[i] = word[:j] + word[j + 1] + word[j] + word[j + 2 :]
    return " ".join(words)


def _fill(template: str, rng: random.Random) -> str:
    plan, plan2 = rng.sample(PLANS, 2)
    return template.format(
        plan=plan,
        plan2=plan2,
        tool=rng.choice(TOOLS),
        month=rng.choice(MONTHS),
        n=rng.randint(2, 40),
    )


def make_ticket(rng: random.Random, ticket_id: str, created_at: datetime) -> dict:
    intent = rng.choice(sorted(TEMPLATES))
    subjects, bodies = TEMPLATES[intent]
    body = _fill(rng.choice(bodies), rng)
    if rng.random() < 0.15:  # a second, lesser topic: the label stays the first
        other = rng.choice([i for i in sorted(TEMPLATES) if i != intent])
        body += " Also, unrelated: " + _fill(rng.choice(TEMPLATES[other][1]), rng).lower()
    body = rng.choice(OPENINGS) + body + rng.choice(CLOSINGS)
    if rng.random() < 0.25:
        body = _typo(body, rng)
    subject = _fill(rng.choice(subjects), rng)
    if rng.random() < 0.1:
        subject = ""  # a subject is optional; the body carries the request
    return {
        "id": ticket_id,
        "created_at": created_at.isoformat().replace("+00:00", "Z"),
        "subject": subject,
        "body": body,
        "channel": rng.choice(CHANNELS),
        "label": intent,
    }


def day_export(day: date, rng: random.Random) -> list[dict]:
    start = datetime(day.year, day.month, day.day)
    count = PER_DAY + rng.randint(-20, 20)
    tickets = []
    for n in range(count):
        at = start + timedelta(seconds=rng.randrange(86400))
        ticket = make_ticket(rng, f"T{day:%Y%m%d}-{n:04d}", at)
        ticket["created_at"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        if rng.random() < 0.6:
            ticket.pop("label")  # most exported tickets are not labelled
        tickets.append(ticket)
    tickets.sort(key=lambda t: t["created_at"])
    # a few bad rows, as real exports have them
    tickets.append({**tickets[0], "body": ""})  # repeats the first id, and has no body
    tickets.append({**make_ticket(rng, f"T{day:%Y%m%d}-bad1", start), "created_at": "yesterday"})
    tickets.append({**make_ticket(rng, f"T{day:%Y%m%d}-bad2", start), "body": None})
    return tickets


def main() -> None:
    OUT.mkdir(exist_ok=True)
    rng = random.Random(20261123)
    for offset in range(DAYS):
        day = FIRST_DAY + timedelta(days=offset)
        lines = [json.dumps(t, ensure_ascii=False) for t in day_export(day, rng)]
        (OUT / f"{day.isoformat()}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    eval_rng = random.Random(7)
    at = datetime(2026, 10, 1)
    evaluation = [make_ticket(eval_rng, f"E{n:04d}", at) for n in range(300)]
    EVAL.write_text(
        "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in evaluation), encoding="utf-8"
    )
    print(f"wrote {DAYS} daily exports to {OUT} and {len(evaluation)} labelled tickets to {EVAL}")


if __name__ == "__main__":
    main()
