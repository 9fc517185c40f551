"""The ``purchase_order`` sample contract (samples/contracts/purchase_order/v1) written as a pydantic model and Python
checks: ``Contract.from_model``'s twin of a file contract (tests/test_python_api.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "samples/contracts/purchase_order/v1"

CURRENCY_WORDS = json.loads((FOLDER / "schema.json").read_text(encoding="utf-8"))["properties"]["currency"]["x-enum-words"]

class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

class Company(Strict):
    name: str = Field(min_length=1, description="the company's name as written")
    taxId: str | None = Field(min_length=1, description="its tax or registration number; null when the document does not "
                              "give it")

class LineItem(Strict):
    line: int = Field(ge=1, description="1-based line number; lines run 1..n")
    sku: str = Field(pattern=r"^[0-9]{6}$", description="the six-digit article number exactly as written")
    description: str = Field(min_length=1, description="the article as the document names it")
    quantity: int = Field(description="number of pieces ordered (2,000 and 1 500 are 2000 and 1500)")
    unitPrice: float = Field(description="price of one piece in the order's currency")

class Party(Strict):
    id: str = Field(pattern=r"^[a-z][a-z0-9_-]*$", description="short lowercase key such as 'dana'")
    name: str = Field(min_length=1, description="the person's name as written")

class Approval(Strict):
    approverId: str = Field(pattern=r"^[a-z][a-z0-9_-]*$", description="id of the party who approved")
    role: str = Field(min_length=1, description="the approver's role or title as written")

class PurchaseOrder(Strict):
    """A purchase order: who sells to whom, which articles at which price, who approved it, how it is paid."""
    supplier: Company = Field(description="the company that sells")
    buyer: Company = Field(description="the company that orders")
    currency: Literal["KRW", "USD", "EUR", "RUB"] = Field(
        description="ISO 4217 code of the prices, from how the document states them (원 is KRW, руб. is RUB)",
        json_schema_extra={"x-enum-words": CURRENCY_WORDS})
    lineItems: list[LineItem] = Field(description="one entry per ordered article, in the order of the document")
    parties: list[Party] = Field(description="the people who approve or sign the order")
    approvals: list[Approval] = Field(description="each approval the document records")
    paymentTerms: str | None = Field(min_length=1, description="when and how the buyer pays; null when the document "
                                     "does not say")


EVIDENCE: dict[str, Any] = {"normalisation": "nfc_whitespace",
                            "text": {"lineItems": "description", "approvals": "role", "parties": "name"}}
CHECKS: list[dict[str, Any]] = [
    {"type": "lookup", "id": "SKU_UNKNOWN", "field": "lineItems[].sku", "catalogue": FOLDER / "skus.csv", "column": "sku",
     "description": "an ordered article is not in the SKU catalogue (a SKU with two digits swapped looks right to a "
                    "reviewer)"},
    {"type": "range", "id": "QUANTITY_OUT_OF_RANGE", "field": "lineItems[].quantity", "min": 1, "max": 10000,
     "description": "a quantity outside what one order line may hold"},
    {"type": "range", "id": "UNIT_PRICE_OUT_OF_RANGE", "field": "lineItems[].unitPrice", "min": 0.01, "max": 1000000,
     "severity": "review", "description": "a unit price no article of the catalogue costs"},
    {"type": "unique", "id": "SKU_REPEATED", "field": "lineItems[].sku", "severity": "warning",
     "description": "the same article on two lines"},
    {"type": "sequence", "id": "LINE_NUMBER", "field": "lineItems[].line", "follow_source": "warning"},
    {"type": "unique", "id": "PARTY_ID_DUPLICATE", "field": "parties[].id"},
    {"type": "reference", "id": "APPROVER_UNKNOWN", "field": "approvals[].approverId", "target": "parties[].id",
     "description": "an approval names someone who is not a party of the order"},
    {"type": "pattern", "id": "TAX_ID_FORMAT", "field": "supplier.taxId", "matches": "^[0-9][0-9-]{8,13}[0-9]$",
     "severity": "warning", "description": "a supplier tax id that is not digits and dashes"},
]
