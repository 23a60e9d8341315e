"""Ops admin for products, stock counters and the stock ledger.

Stock is never an editable model field here. The counters are read-only everywhere; the only way to change
them is one of two forms that call ``inventory.services`` (``inventory.admin.stock_forms``):

* *Adjust* (``stock_adjust``): a signed delta applied with an F-expression, refused if available stock would
  go below zero;
* *Set counted stock* (``stock_set_counted``): an absolute figure, accepted only if the stock still
  has the ``version`` the form was loaded with.

Both need the ``inventory.adjust_stock`` permission (group "Stock managers"); anyone else gets 403.

Modules: ``products`` (product admin), ``stock`` (the counters' admin), ``stock_forms`` (the two form views),
``ledger`` (the ledger admin and the ledger table shown on stock and order pages).
"""

from inventory.admin.ledger import StockMovementAdmin, ledger_table
from inventory.admin.products import ProductAdmin
from inventory.admin.stock import InventoryAdmin

__all__ = ["InventoryAdmin", "ProductAdmin", "StockMovementAdmin", "ledger_table"]
